//! One copy of equal values across cached objects. Thousands of VMs that ask for the same
//! images hold equal resolved images and conditions, and their runner pods equal specs and
//! statuses: the caches keep each distinct value once, and an `Arc` to it per object.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use foldhash::fast::FixedState;

/// A value the caches share: what it is hashed by (equal values hash alike; values that
/// hash alike are told apart by `==`).
pub trait Shareable: PartialEq {
    fn hash_into(&self, state: &mut impl Hasher);
}

/// The distinct values of a type that cached objects hold.
pub struct Interner<T> {
    values: Mutex<Values<T>>,
}

struct Values<T> {
    by_hash: HashMap<u64, Vec<Weak<T>>, FixedState>,
    /// Entries held, live or not.
    entries: usize,
    /// When to drop the entries whose values no object holds any more.
    prune_at: usize,
}

/// The fewest entries an interner holds before it prunes.
const PRUNE_FLOOR: usize = 1024;

impl<T: Shareable> Default for Interner<T> {
    fn default() -> Self {
        Self {
            values: Mutex::new(Values {
                by_hash: HashMap::default(),
                entries: 0,
                prune_at: PRUNE_FLOOR,
            }),
        }
    }
}

impl<T: Shareable> Interner<T> {
    fn lock(&self) -> MutexGuard<'_, Values<T>> {
        // Every update leaves a whole map: a panicking holder left one too.
        self.values.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shared copy of `value`: one held already when an equal value is, else `value`,
    /// which later equal values then share.
    pub fn intern(&self, value: Arc<T>) -> Arc<T> {
        let hash = {
            let mut state = FixedState::default().build_hasher();
            value.hash_into(&mut state);
            state.finish()
        };
        let mut values = self.lock();
        let bucket = values.by_hash.entry(hash).or_default();
        if let Some(held) = bucket
            .iter()
            .filter_map(Weak::upgrade)
            .find(|held| *held == value)
        {
            return held;
        }
        bucket.push(Arc::downgrade(&value));
        values.entries += 1;
        if values.entries >= values.prune_at {
            values.prune();
        }
        value
    }

    /// The distinct values held.
    #[cfg(test)]
    fn live(&self) -> usize {
        let values = self.lock();
        values
            .by_hash
            .values()
            .flatten()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

impl<T> Values<T> {
    /// Drops the entries no object holds; the next prune comes when the entries have
    /// doubled, so pruning costs a constant per value interned.
    fn prune(&mut self) {
        self.by_hash.retain(|_, bucket| {
            bucket.retain(|w| w.strong_count() > 0);
            !bucket.is_empty()
        });
        self.by_hash.shrink_to_fit();
        self.entries = self.by_hash.values().map(Vec::len).sum();
        self.prune_at = (self.entries * 2).max(PRUNE_FLOOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Image(String, u32);

    impl Shareable for Image {
        // Only the name: values that hash alike but differ stay apart.
        fn hash_into(&self, state: &mut impl Hasher) {
            state.write(self.0.as_bytes());
        }
    }

    fn image(name: impl Into<String>, n: u32) -> Arc<Image> {
        Arc::new(Image(name.into(), n))
    }

    #[test]
    fn equal_values_share_one_copy_and_different_ones_stay_apart() {
        let interner = Interner::default();
        let a = interner.intern(image("disk", 1));
        let b = interner.intern(image("disk", 1));
        let c = interner.intern(image("disk", 2));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(*c, Image("disk".into(), 2));
        assert_eq!(interner.live(), 2);
    }

    #[test]
    fn values_no_object_holds_are_dropped() {
        let interner = Interner::default();
        let kept = interner.intern(image("kept", 0));
        for i in 0..10 * PRUNE_FLOOR {
            drop(interner.intern(image(format!("gone-{i}"), 0)));
        }
        let values = interner.lock();
        assert!(values.entries <= PRUNE_FLOOR, "{} entries", values.entries);
        drop(values);
        assert_eq!(interner.live(), 1);
        assert!(Arc::ptr_eq(&kept, &interner.intern(image("kept", 0))));
    }
}
