//! The operator's background tasks, and which of them ended first.

use std::future::Future;

/// Background tasks: each runs for the operator's whole life, and all end
/// when the operator future ends or is dropped.
#[derive(Default)]
pub struct Tasks(Vec<(&'static str, tokio::task::JoinHandle<()>)>);

impl Tasks {
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.0.push((name, tokio::spawn(task)));
    }

    /// Waits until one of the tasks ends (returns, or panics) and says which.
    pub async fn first_ended(&mut self) -> anyhow::Error {
        if self.0.is_empty() {
            return std::future::pending().await;
        }
        let (result, i, _) = futures::future::select_all(self.0.iter_mut().map(|(_, h)| h)).await;
        let name = self.0[i].0;
        match result {
            Ok(()) => anyhow::anyhow!("the {name} stopped"),
            Err(e) => anyhow::anyhow!("the {name} failed: {e}"),
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for (_, handle) in &self.0 {
            handle.abort();
        }
    }
}
