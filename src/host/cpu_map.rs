//! The cpu_map facts of a host: which features a model has (read a model at a time, on first
//! use), which feature names libvirt knows, where they come from.

use super::Host;
use crate::error::{Error, Result};
use crate::libvirt::cpu_map::CpuMap;
use std::collections::BTreeSet;

impl Host {
    /// The resolved features of a libvirt x86 CPU model (libvirt spellings), or None when the
    /// model is unknown. Read from the cpu_map directory on first use (only that model's file and
    /// its parents'), else from the built-in table.
    pub fn model_features(&self, model: &str) -> Option<BTreeSet<String>> {
        if let Some(hit) = self
            .models
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(model)
        {
            return hit.clone();
        }
        let found = match &self.cpu_map_dir {
            Some(dir) => match CpuMap::load_models(dir, &[model]) {
                Ok(m) => m.model_features(model).cloned(),
                Err(e) => {
                    self.cpu_map_problems
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(format!(
                            "{e}; the built-in table answered for model '{model}'"
                        ));
                    CpuMap::builtin().model_features(model).cloned()
                }
            },
            None => CpuMap::builtin().model_features(model).cloned(),
        };
        self.models
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(model.to_string(), found.clone());
        found
    }

    /// Whether libvirt knows the x86 feature `name` (libvirt spelling): libvirt 9.0's list, else
    /// the host's own `x86_features.xml` (a newer libvirt knows more), read only on a miss. For
    /// another host's facts (`fleet`, [`super::HostOptions::only_given_facts`]) with a cpu_map, that
    /// cpu_map's list alone: libvirt 7.0's lacks names 9.0's has (`pks`, `tsx-ldtrk`...).
    #[must_use]
    pub fn feature_known(&self, name: &str) -> bool {
        let own_list_only = self.only_given_facts && self.cpu_map_dir.is_some();
        if !own_list_only && crate::cpu::is_known_x86_feature(name) {
            return true;
        }
        self.x86_feature_names
            .get_or_init(|| {
                // A cpu_map that cannot be read knows no more names than libvirt 9.0's: a
                // model read from it says so (`cpu-map-unreadable`).
                self.cpu_map_dir
                    .as_deref()
                    .and_then(|d| crate::libvirt::cpu_map::feature_names(d).ok())
                    .unwrap_or_default()
            })
            .contains(name)
    }

    /// Where model features come from: the cpu_map directory, or "built-in".
    #[must_use]
    pub fn cpu_map_source(&self) -> String {
        self.cpu_map_dir
            .as_ref()
            .map_or_else(|| "built-in".to_string(), |d| d.display().to_string())
    }

    /// Every model, read in full (for `virt-cpu-policy host`).
    ///
    /// # Errors
    /// [`Error::Host`] when the cpu_map directory is broken.
    pub fn full_cpu_map(&self) -> Result<CpuMap> {
        match &self.cpu_map_dir {
            Some(dir) => CpuMap::load(dir).map_err(|e| Error::Host(e.to_string())),
            None => Ok(CpuMap::builtin()),
        }
    }

    /// Problems met reading cpu_map model files after start, each already answered from the
    /// built-in table.
    #[must_use]
    pub fn cpu_map_problems(&self) -> Vec<String> {
        self.cpu_map_problems
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
