//! The rules in force: the last compiled rule set, swapped whole when mappings change.

use std::sync::{Arc, PoisonError, RwLock};

use crate::core::rules::{CompileOptions, MappingInput, RuleSet};

/// The rules in force. Readers get the whole rule set of one compilation.
#[derive(Debug, Default)]
pub struct RulesInForce {
    current: RwLock<Arc<RuleSet>>,
    /// Counts the recompilations, for whoever acts when the rules change.
    compiled: tokio::sync::watch::Sender<u64>,
}

/// The rules before and after a recompilation.
#[derive(Debug, Clone)]
pub struct RuleChange {
    pub old: Arc<RuleSet>,
    pub new: Arc<RuleSet>,
}

impl RulesInForce {
    /// The rules in force.
    pub fn current(&self) -> Arc<RuleSet> {
        // The lock only guards a pointer swap: a writer that panicked left a whole rule set.
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Changes whenever the rules are recompiled.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.compiled.subscribe()
    }

    /// Compiles `inputs` (reusing the regexes the rules in force compiled) and puts the
    /// result in force.
    pub fn recompile(&self, inputs: &[MappingInput], options: &CompileOptions) -> RuleChange {
        let new = Arc::new(RuleSet::compile_after(inputs, options, &self.current()));
        let mut guard = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::replace(&mut *guard, Arc::clone(&new));
        drop(guard);
        self.compiled.send_modify(|n| *n += 1);
        RuleChange { old, new }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::repository_mapping;

    #[test]
    fn recompiling_swaps_the_rules_and_returns_both() {
        let index = RulesInForce::default();
        assert!(index.current().is_empty());
        let inputs = [repository_mapping("m", "disk", "x.io/disk", false)];
        let change = index.recompile(&inputs, &CompileOptions::default());
        assert!(change.old.is_empty());
        assert_eq!(change.new.len(), 1);
        assert!(Arc::ptr_eq(&index.current(), &change.new));
    }

    #[test]
    fn a_poisoned_lock_keeps_the_rules() {
        let index = Arc::new(RulesInForce::default());
        let inputs = [repository_mapping("m", "disk", "x.io/disk", false)];
        index.recompile(&inputs, &CompileOptions::default());
        let poisoner = Arc::clone(&index);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.current.write().unwrap();
            panic!("poison the lock");
        })
        .join();
        assert!(index.current.is_poisoned());
        assert_eq!(
            index.current().len(),
            1,
            "a poisoned lock must not mean no rules"
        );
        index.recompile(&[], &CompileOptions::default());
        assert!(index.current().is_empty());
    }
}
