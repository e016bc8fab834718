//! Confinement of script hook processes (spec section 6): what a hook may
//! read, write and reach, and how much it may use. Decided once per plugin at
//! load from the operator's grant ([`Confinement`]), applied to every process
//! the plugin starts — one-shot or worker — by [`super::spawn`].
//!
//! (Being built: today a `Confinement` confines nothing.)

/// How one plugin's processes are confined.
#[derive(Debug, Clone, Default)]
pub struct Confinement {}

impl Confinement {
    /// No confinement at all.
    pub fn none() -> Self {
        Confinement::default()
    }
}

/// What must happen when a confined process's life ends (a per-call cgroup
/// to kill and remove, …). Kept by the caller for as long as the process
/// runs; dropping it cleans up.
#[derive(Debug, Default)]
pub struct Cleanup {}
