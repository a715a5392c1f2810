package sim

import "math/bits"

// Rand is the simulator's only source of randomness: xoshiro256** seeded
// through splitmix64. Invariants:
//   - every choice in a run is drawn from a Rand derived from the run's seed,
//     never from global randomness, so a seed replays byte for byte;
//   - subsystems draw from their own forked stream, so adding a draw in one
//     (say, the network) does not reshuffle the choices of another (say, a
//     consumer), which keeps old seeds meaningful across small changes.
type Rand struct {
	s [4]uint64
}

// NewRand seeds a generator. Equal seeds give equal streams.
func NewRand(seed uint64) *Rand {
	r := &Rand{}
	x := seed
	for i := range r.s {
		x, r.s[i] = splitmix64(x)
	}
	return r
}

func splitmix64(x uint64) (next, out uint64) {
	x += 0x9e3779b97f4a7c15
	z := x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return x, z ^ (z >> 31)
}

// Uint64 returns the next 64 random bits.
func (r *Rand) Uint64() uint64 {
	s := &r.s
	result := bits.RotateLeft64(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = bits.RotateLeft64(s[3], 45)
	return result
}

// Fork returns an independent stream derived from this one.
func (r *Rand) Fork() *Rand { return NewRand(r.Uint64()) }

// Intn returns a uniform int in [0, n). n must be positive.
func (r *Rand) Intn(n int) int {
	if n <= 0 {
		panic("sim: Intn needs a positive bound")
	}
	hi, _ := bits.Mul64(r.Uint64(), uint64(n))
	return int(hi)
}

// RangeInt64 returns a uniform int64 in [lo, hi] (inclusive); lo when hi < lo.
func (r *Rand) RangeInt64(lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	span := uint64(hi - lo + 1)
	v, _ := bits.Mul64(r.Uint64(), span)
	return lo + int64(v)
}

// Float64 returns a uniform float64 in [0, 1).
func (r *Rand) Float64() float64 {
	return float64(r.Uint64()>>11) / (1 << 53)
}

// Chance reports true with probability ratio (0 never, 1 always).
func (r *Rand) Chance(ratio float64) bool {
	if ratio <= 0 {
		return false
	}
	if ratio >= 1 {
		return true
	}
	return r.Float64() < ratio
}

// RangeFloat returns a uniform float64 in [lo, hi).
func (r *Rand) RangeFloat(lo, hi float64) float64 {
	return lo + (hi-lo)*r.Float64()
}
