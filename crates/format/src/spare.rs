//! What a batch of one small job leaves for the next batch: its buffer pair
//! and its zstd context.
//!
//! A batch of one job (an HTTP PUT of a small file) maps a buffer pair of a
//! few MiB, makes a zstd context, touches a few KiB of them, and used to
//! drop them at its end. Dropping a map that was touched makes the kernel
//! flush the TLB of every other core running the process (an interrupt to
//! each), and making a context runs `cpuid`, which traps to the hypervisor
//! in a virtual machine: together about 65 µs of CPU per small PUT in a
//! profile on the development machine (docs/benchmarks.md), on the PUT's
//! path. So such a batch gives them back here, and the next batch of any
//! engine whose buffers are the same size and whose level is the same
//! takes them instead of making its own.
//!
//! Only a pair whose input never held more than [`LIGHT`] bytes is kept
//! (its output never holds more than its input, see `engine::encode`), with
//! a context that never compressed more, and at most [`KEPT`] of them. The
//! process so holds at most `KEPT` times two `LIGHT` buffers and a context
//! for a `LIGHT` input (0.28 MB at level 3, 0.58 MB at levels 19 to 22, as
//! zstd reports them) outside any append's budget: at most 5 MiB. A pair
//! that held more is unmapped as before: its batch had enough work to pay
//! for it.

use std::sync::Mutex;

use zstd::bulk::Compressor;

use crate::pages::PageBuf;

/// The most input bytes a kept pair has held.
pub(crate) const LIGHT: usize = 16 << 10;
/// The most pairs kept at once.
pub(crate) const KEPT: usize = 8;

/// A kept buffer pair (input, output) and the context that compressed it.
pub(crate) struct Spare {
    pub(crate) buffers: (PageBuf, PageBuf),
    pub(crate) zstd: Option<Compressor<'static>>,
    level: i32,
}

static SPARES: Mutex<Vec<Spare>> = Mutex::new(Vec::new());

fn spares() -> std::sync::MutexGuard<'static, Vec<Spare>> {
    // A panic while the list was held leaves it whole: each push and pop is
    // one step.
    SPARES.lock().unwrap_or_else(|p| p.into_inner())
}

/// A kept pair whose buffers hold `input` and `output` bytes, for `level`.
pub(crate) fn take(input: usize, output: usize, level: i32) -> Option<Spare> {
    let mut kept = spares();
    let at = kept.iter().position(|s| {
        s.level == level
            && s.buffers.0.capacity() == PageBuf::capacity_for(input)
            && s.buffers.1.capacity() == PageBuf::capacity_for(output)
    })?;
    Some(kept.swap_remove(at))
}

/// Keeps `buffers` and `zstd` for a later batch if they are light (see the
/// module doc) and there is room; drops them otherwise.
pub(crate) fn give(buffers: (PageBuf, PageBuf), zstd: Option<Compressor<'static>>, level: i32) {
    if buffers.0.high_water() > LIGHT || buffers.1.high_water() > LIGHT {
        return;
    }
    let mut kept = spares();
    if kept.len() < KEPT {
        kept.push(Spare {
            buffers,
            zstd,
            level,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A light pair comes back for the same sizes and level only; a pair that
    /// held more than `LIGHT` is never kept.
    #[test]
    fn only_light_pairs_come_back_and_only_for_their_sizes() {
        // Sizes no other test's engine uses, so a parallel test cannot take them.
        let (input, output) = (7 << 20, 5 << 20);
        let pair = || {
            (
                PageBuf::new(input, false).unwrap(),
                PageBuf::new(output, false).unwrap(),
            )
        };

        let mut light = pair();
        light.0.extend_from_slice(&[1; LIGHT]);
        give(light, None, 3);
        assert!(take(input, output, 4).is_none(), "another level");
        assert!(take(input, 3 << 20, 3).is_none(), "another size");
        let back = take(input, output, 3).expect("the light pair");
        assert_eq!(back.buffers.0.high_water(), LIGHT);
        assert!(take(input, output, 3).is_none(), "taken once");

        let mut heavy = pair();
        heavy.0.extend_from_slice(&[1; LIGHT + 1]);
        give(heavy, None, 3);
        assert!(take(input, output, 3).is_none(), "a heavy pair is unmapped");
    }
}
