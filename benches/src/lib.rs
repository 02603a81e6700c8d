//! What the benchmark binaries share: the generated input.

/// `len` bytes of source-like text that zstd compresses as it does code, the
/// same for the same `seed`.
pub fn compressible(seed: u64, len: usize) -> Vec<u8> {
    let words: [&[u8]; 8] = [
        b"fn ", b"let ", b"mut ", b"self", b"=> ", b"{}\n", b"0x", b"ident_",
    ];
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 8) as usize]);
        if x.is_multiple_of(5) {
            out.extend_from_slice(&x.to_le_bytes()[..3]);
        }
    }
    out.truncate(len);
    out
}
