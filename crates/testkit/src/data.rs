//! Test data: deterministic bytes, the same for the same seed on every
//! machine, so that tests can pin what archives of them look like.

/// Deterministic bytes that zstd cannot shrink.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Deterministic, compressible text.
pub fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "alpha ",
        "beta ",
        "gamma ",
        "delta\n",
        "fn main() {}\n",
        "let x = 1;\n",
    ];
    let mut out = Vec::with_capacity(len + 16);
    let mut x = seed | 1;
    while out.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(x >> 60) as usize % words.len()].as_bytes());
    }
    out.truncate(len);
    out
}
