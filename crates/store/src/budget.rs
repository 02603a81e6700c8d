//! One budget for the engine memory of every append in flight.
//!
//! An append's engine holds up to [`Engine::memory_bound`] bytes (its buffer
//! pool and one zstd context per worker), which archive properties can make
//! large: a level-22 archive with 64 MiB chunks costs over a GiB on two
//! workers. Each append therefore takes its bound from this budget before its
//! engine starts and gives it back when it ends; appends that do not fit wait
//! for others to finish instead of allocating past it, for a while, and are
//! then refused (to be sent again). An archive whose one append could never
//! fit is refused when it is created.
//!
//! [`Engine::memory_bound`]: znippy_format::Engine::memory_bound

use std::sync::Arc;
use std::time::Duration;

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
    wait: Duration,
}

impl Budget {
    pub(crate) fn new(bytes: u64, workers: usize, wait: Duration) -> Self {
        let units = (bytes / UNIT).min(u64::from(u32::MAX));
        Budget {
            bytes: units * UNIT,
            workers,
            permits: Arc::new(Semaphore::new(units as usize)),
            wait,
        }
    }

    /// What one append with `props` may hold. Measuring a zstd context can
    /// take most of a second at an ultra level, so it runs off the async
    /// threads; callers do it once per archive (at create and at open), not
    /// per append.
    pub(crate) async fn bound(&self, props: ArchiveProps) -> Result<u64> {
        let workers = self.workers;
        tokio::task::spawn_blocking(move || Engine::memory_bound(props, workers))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))
    }

    /// `bytes` in the budget's units, if they fit in the whole budget.
    pub(crate) fn check(&self, bytes: u64) -> Result<u32> {
        if bytes > self.bytes {
            return Err(StoreError::OverBudget {
                need: bytes,
                budget: self.bytes,
            });
        }
        Ok(bytes.div_ceil(UNIT) as u32)
    }

    /// Waits, up to the budget's wait, until an append bounded by `bytes` fits, and
    /// holds its share until the permit is dropped. The wait is bounded
    /// because an upload holds its share while its body arrives: a few slow
    /// ones must not stall every other archive's appends for good.
    pub(crate) async fn take(&self, bytes: u64) -> Result<OwnedSemaphorePermit> {
        let units = self.check(bytes)?;
        let permit = Arc::clone(&self.permits).acquire_many_owned(units);
        match tokio::time::timeout(self.wait, permit).await {
            Ok(permit) => {
                permit.map_err(|_| StoreError::Task("the memory budget was closed".into()))
            }
            Err(_) => Err(StoreError::MemoryBusy(self.wait)),
        }
    }
}
