//! Test data: deterministic bytes, the same for the same seed on every
//! machine, so that tests can pin what archives of them look like.
//!
//! Every seed gives its own bytes: the seed is mixed before it starts the
//! generator, so neighbouring seeds (2 and 3, say) do not collide, and a test
//! that wants two files with the same content says so by reusing a seed.

/// xorshift64: fast, and the same run for the same seed.
pub struct Rng(u64);

impl Rng {
    /// A generator of its own for each seed.
    pub fn new(seed: u64) -> Rng {
        Rng::from_state(seed.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The generator in `state`, as a fuzzer saved it to replay a case.
    pub fn from_state(state: u64) -> Rng {
        // xorshift stays at zero once there.
        Rng(state | 1)
    }

    /// Where the generator is: [`Rng::from_state`] goes on from here.
    pub fn state(&self) -> u64 {
        self.0
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Deterministic bytes that zstd cannot shrink.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Deterministic, compressible text: words and lines of code.
pub fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "alpha ",
        "beta ",
        "gamma ",
        "delta\n",
        "fn main() {}\n",
        "let x = 1;\n",
    ];
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        let w = words[(rng.next_u64() >> 60) as usize % words.len()];
        out.extend_from_slice(w.as_bytes());
    }
    out.truncate(len);
    out
}

/// Half text, half noise: compresses, but not to nothing.
pub fn mixed(seed: u64, len: usize) -> Vec<u8> {
    let mut b = text(seed, len / 2);
    b.extend(noise(seed, len - len / 2));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbouring_seeds_differ() {
        for f in [noise, text, mixed] {
            let all: Vec<Vec<u8>> = (0..64).map(|s| f(s, 256)).collect();
            for (i, a) in all.iter().enumerate() {
                assert_eq!(a.len(), 256);
                assert!(all[i + 1..].iter().all(|b| b != a), "seed {i}");
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_bytes() {
        assert_eq!(noise(7, 1000), noise(7, 1000));
        assert_eq!(text(7, 1000)[..100], text(7, 100)[..]);
    }
}
