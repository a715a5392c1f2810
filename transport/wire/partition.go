package wire

// Invariants:
//   - The hash is FNV-1a 64 over the raw key bytes, exactly as every Fibril client
//     computes it (PROTOCOL.md §2.2); changing it would move keys between partitions.
//   - A partition count of 0 or 1 always yields partition 0.

const (
	fnvOffsetBasis64 = 0xCBF29CE484222325
	fnvPrime64       = 0x100000001B3
)

// PartitionKeyHash returns the FNV-1a 64-bit hash of key.
func PartitionKeyHash(key []byte) uint64 {
	h := uint64(fnvOffsetBasis64)
	for _, b := range key {
		h ^= uint64(b)
		h *= fnvPrime64
	}
	return h
}

// PartitionForKey picks the partition a client routes a keyed publish to:
// hash mod partitionCount, or 0 when partitionCount is 1 or less.
func PartitionForKey(key []byte, partitionCount uint32) uint32 {
	if partitionCount <= 1 {
		return 0
	}
	return uint32(PartitionKeyHash(key) % uint64(partitionCount))
}
