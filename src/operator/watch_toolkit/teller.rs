//! How the read side tells what it sees to whoever acts on it now: the write side listens
//! while it runs (on the leader); told to nobody — a replica standing by — a message is
//! dropped, so nothing piles up in a replica that does not lead. Whoever starts listening
//! starts from what the read side holds then, not from what it told before.

use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};

/// Tells messages of type `T` to the one listener there may be.
#[derive(Debug)]
pub struct Teller<T>(Arc<Mutex<Option<UnboundedSender<T>>>>);

impl<T> Clone for Teller<T> {
    fn clone(&self) -> Self {
        Teller(Arc::clone(&self.0))
    }
}

impl<T> Default for Teller<T> {
    fn default() -> Self {
        Teller(Arc::default())
    }
}

impl<T> Teller<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<UnboundedSender<T>>> {
        // The lock guards one sender: a holder that panicked left it whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells `message` to the listener, if one listens.
    pub fn tell(&self, message: T) {
        let mut listener = self.lock();
        if let Some(tx) = listener.as_ref()
            && tx.unbounded_send(message).is_err()
        {
            // It stopped listening.
            *listener = None;
        }
    }

    /// Listens from now on (in place of any listener before).
    pub fn listen(&self) -> UnboundedReceiver<T> {
        let (tx, rx) = unbounded();
        *self.lock() = Some(tx);
        rx
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn what_is_told_to_nobody_is_dropped() {
        let teller = Teller::default();
        teller.tell(1);
        let mut heard = teller.listen();
        teller.tell(2);
        drop(teller);
        assert_eq!(heard.next().await, Some(2));
        assert_eq!(heard.next().await, None);
    }

    #[tokio::test]
    async fn a_listener_gone_is_forgotten() {
        let teller = Teller::default();
        drop(teller.listen());
        teller.tell(1);
        assert!(teller.lock().is_none());
    }
}
