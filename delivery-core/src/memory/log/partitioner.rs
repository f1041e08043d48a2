//! Which partition a key goes to: Kafka's default partitioner, so a key lands on the partition it
//! would land on in a Kafka topic with the same number of partitions.

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with Kafka's seed, over the key's bytes.
fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    // Kafka hashes an `int` length; a key longer than that wraps as Java's would.
    let mut h = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        if tail.len() == 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of `key` among `partitions`: `toPositive(murmur2(key)) % partitions`, as
/// Kafka's producer picks it for a keyed record.
pub(super) fn partition_for(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of Kafka's own `Utils.murmur2`.
    #[test]
    fn murmur2_matches_kafka() {
        // As Akka's port checks them.
        let cases: [(&str, i32); 5] = [
            ("1", -1993445489),
            ("12", 126087238),
            ("123", -267702483),
            ("1234", -1614185708),
            ("12345", -1188365604),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key.as_bytes()) as i32, expected, "murmur2({key:?})");
        }
        // Kafka's `UtilsTest.testMurmur2`.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key) as i32, expected, "murmur2({key:?})");
        }
    }

    #[test]
    fn partitions_are_in_range_and_stable() {
        for n in 1..=7 {
            for key in ["a", "order-1", "", "0123456789"] {
                let p = partition_for(key.as_bytes(), n);
                assert!(p < n);
                assert_eq!(p, partition_for(key.as_bytes(), n));
            }
        }
        assert_eq!(partition_for(b"x", 0), 0, "no partitions is read as one");
    }
}
