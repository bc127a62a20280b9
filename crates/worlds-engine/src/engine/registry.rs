//! The registry: the workflows and activities registered on a world, by name.

use std::sync::Arc;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

use crate::error::WorldError;

use super::authoring::definitions::{
    ActivityDef, ActivityDefHandle, Definition, WorkflowDef, WorkflowDefHandle,
};

/// Registered workflows and activities, by name.
#[derive(Default)]
pub(crate) struct Registry {
    workflows: RwLock<FxHashMap<Arc<str>, WorkflowDef>>,
    activities: RwLock<FxHashMap<Arc<str>, ActivityDef>>,
}

impl Registry {
    pub(crate) fn register(&self, def: Definition) -> Result<(), WorldError> {
        match def {
            Definition::Workflow(WorkflowDefHandle(def)) => {
                let mut map = self.workflows.write();
                if map.contains_key(&def.name) {
                    return Err(WorldError::conflict(format!(
                        "a workflow named '{}' is already registered; names must be unique",
                        def.name
                    )));
                }
                map.insert(def.name.clone(), def);
            }
            Definition::Activity(ActivityDefHandle(def)) => {
                let mut map = self.activities.write();
                if map.contains_key(&def.name) {
                    return Err(WorldError::conflict(format!(
                        "an activity named '{}' is already registered; names must be unique",
                        def.name
                    )));
                }
                map.insert(def.name.clone(), def);
            }
            // Hook definitions are kept by the engine's hook kit (see `World::register`).
            Definition::Hook { .. } => {}
        }
        Ok(())
    }

    pub(crate) fn workflow(&self, name: &str) -> Option<WorkflowDef> {
        self.workflows.read().get(name).cloned()
    }

    pub(crate) fn activity(&self, name: &str) -> Option<ActivityDef> {
        self.activities.read().get(name).cloned()
    }

    pub(crate) fn has_activity(&self, name: &str) -> bool {
        self.activities.read().contains_key(name)
    }

    /// The user's workflows (the built-in ones of bulk operations and sweeps left out).
    pub(crate) fn workflow_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .workflows
            .read()
            .keys()
            .filter(|k| {
                &***k != super::bulk::BULK_WORKFLOW && &***k != super::prune::PRUNE_WORKFLOW
            })
            .map(|k| k.to_string())
            .collect();
        names.sort();
        names
    }
}
