package schemas

import "math/bits"

// DrawBatch fills dst with the sample ids of request r (r = 0, 1, ...) of
// party m when the aggregator draws the batches (Control.BatchSeed). The
// requests of a party walk through a fresh pseudo-random permutation of
// 0..n-1 in every epoch: request r of batch size b holds the positions
// r*b .. r*b+b-1 of that walk, so each sample appears exactly once per
// epoch (a party's visits of any one label are as few as the training
// allows, which is what label privacy accounts). The permutation is keyed
// by the seed, the party and the epoch (a 4-round Feistel network with
// cycle walking). The party computes the ids to know which samples to
// evaluate, the aggregator to check the request; neither can choose them.
// It does not allocate.
func DrawBatch(dst []uint32, seed uint64, m int, r uint64, n int) {
	if n <= 0 {
		return
	}
	un := uint64(n)
	// Half width: the smallest h with 2^(2h) >= n.
	h := uint((bits.Len64(un-1) + 1) / 2)
	if h == 0 {
		h = 1
	}
	pos := r * uint64(len(dst))
	for j := range dst {
		p := pos + uint64(j)
		epoch, i := p/un, p%un
		key := mix(seed ^ mix(uint64(m)+0x9e3779b97f4a7c15) ^ mix(epoch+0x632be59bd9b4e019))
		x := feistel(i, key, h)
		for x >= un { // cycle walking: at most a few rounds on average
			x = feistel(x, key, h)
		}
		dst[j] = uint32(x)
	}
}

// feistel permutes x in [0, 2^(2h)) with a 4-round balanced Feistel
// network keyed by key.
func feistel(x, key uint64, h uint) uint64 {
	mask := uint64(1)<<h - 1
	l, r := x>>h&mask, x&mask
	for round := uint64(0); round < 4; round++ {
		l, r = r, l^(mix(r^key^(round<<56))&mask)
	}
	return l<<h | r
}

// mix is splitmix64's finaliser.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
