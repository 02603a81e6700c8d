//! One budget for the engine memory of every append in flight.
//!
//! An append's engine holds up to [`Engine::memory_bound`] bytes (its buffer
//! pool and one zstd context per worker), which archive properties can make
//! large: a level-22 archive with 64 MiB chunks costs over a GiB on two
//! workers. Each append therefore takes its bound from this budget before its
//! engine starts and gives it back when it ends; appends that do not fit wait
//! for others to finish instead of allocating past it. An archive whose one
//! append could never fit is refused when it is created.
//!
//! [`Engine::memory_bound`]: znippy_format::Engine::memory_bound

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use znippy_format::{ArchiveProps, Engine};

use crate::error::{Result, StoreError};

/// The budget is counted in KiB, so a `u32` of permits covers 4 TiB.
const UNIT: u64 = 1 << 10;

#[derive(Clone)]
pub(crate) struct Budget {
    bytes: u64,
    workers: usize,
    permits: Arc<Semaphore>,
}

impl Budget {
    pub(crate) fn new(bytes: u64, workers: usize) -> Self {
        let units = (bytes / UNIT).min(u64::from(u32::MAX));
        Budget {
            bytes: units * UNIT,
            workers,
            permits: Arc::new(Semaphore::new(units as usize)),
        }
    }

    /// What one append with `props` may hold, checked against the whole budget.
    /// Measuring a zstd context can take most of a second at an ultra level,
    /// so it runs off the async threads.
    pub(crate) async fn need(&self, props: ArchiveProps) -> Result<u32> {
        let workers = self.workers;
        let bytes = tokio::task::spawn_blocking(move || Engine::memory_bound(props, workers))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?;
        if bytes > self.bytes {
            return Err(StoreError::OverBudget {
                need: bytes,
                budget: self.bytes,
            });
        }
        Ok(bytes.div_ceil(UNIT) as u32)
    }

    /// Waits until an append with `props` fits, and holds its share until the
    /// permit is dropped.
    pub(crate) async fn take(&self, props: ArchiveProps) -> Result<OwnedSemaphorePermit> {
        let units = self.need(props).await?;
        Arc::clone(&self.permits)
            .acquire_many_owned(units)
            .await
            .map_err(|_| StoreError::Task("the memory budget was closed".into()))
    }
}
