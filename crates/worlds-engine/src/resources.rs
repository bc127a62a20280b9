//! Shared application state for steps: values registered on the world by type
//! ([`World::provide`](crate::World::provide)) and read by steps from their context
//! (`ctx.resource::<Pool>()`).

use std::any::{Any, TypeId};
use std::sync::Arc;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

use crate::error::WorldError;

/// Values by type.
#[derive(Default)]
pub(crate) struct Resources {
    by_type: RwLock<FxHashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resources")
            .field("count", &self.by_type.read().len())
            .finish()
    }
}

impl Resources {
    /// Stores `value`, replacing an earlier value of its type.
    pub(crate) fn provide<T: Send + Sync + 'static>(&self, value: T) {
        self.by_type
            .write()
            .insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`.
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Result<Arc<T>, WorldError> {
        self.by_type
            .read()
            .get(&TypeId::of::<T>())
            .cloned()
            .and_then(|value| value.downcast::<T>().ok())
            .ok_or_else(|| WorldError::NotFound {
                what: "resource",
                id: format!(
                    "{} (provide it with world.provide(value) before the world runs steps)",
                    std::any::type_name::<T>()
                ),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_type_and_replaced() {
        let resources = Resources::default();
        assert!(resources.get::<String>().is_err());
        resources.provide(String::from("a"));
        resources.provide(7u32);
        assert_eq!(*resources.get::<String>().unwrap(), "a");
        resources.provide(String::from("b"));
        assert_eq!(*resources.get::<String>().unwrap(), "b");
        assert_eq!(*resources.get::<u32>().unwrap(), 7);
        let err = resources.get::<u64>().unwrap_err();
        assert!(err.to_string().contains("u64"), "{err}");
    }
}
