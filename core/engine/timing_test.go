package engine

import (
	"sort"
	"testing"
	"time"
)

func TestTimingBreakdown(t *testing.T) {
	sb := newSB(t, nil)
	var spawn, total []float64
	for i := 0; i < 300; i++ {
		st := time.Now()
		r := run(sb, "/bin/true")
		total = append(total, float64(time.Since(st).Microseconds()))
		spawn = append(spawn, r.Usage.SpawnMicros)
	}
	sort.Float64s(spawn)
	sort.Float64s(total)
	t.Logf("spawn median %vus total median %vus", spawn[150], total[150])
}
