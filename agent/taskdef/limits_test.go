package taskdef

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigDefinition is a task definition with n volumes and ten containers, each mounting every volume
// once (n mount points each): the shape whose validation used to compare every mount point with every
// volume. With n = MaxEntries it is legal.
func bigDefinition(n int) []byte {
	var vols, mounts []string
	for i := range n {
		vols = append(vols, fmt.Sprintf(`{"name": "v%d"}`, i))
		mounts = append(mounts, fmt.Sprintf(`{"sourceVolume": "v%d", "containerPath": "/m/%d"}`, n-1-i, i))
	}
	containers := make([]string, MaxContainers)
	for i := range containers {
		containers[i] = ctr(fmt.Sprintf("c%d", i), `"mountPoints": [`+strings.Join(mounts, ", ")+`]`)
	}
	return []byte(doc(`"volumes": [`+strings.Join(vols, ", ")+`]`, containers...))
}

// TestHugeDefinitionRefusedByCounts sends a 5 MB definition (80 000 volumes and mount points, which
// took 13 s of CPU to validate when every mount point was looked up among the volumes) and checks
// that it is refused by the count limits alone: the unknown volume and the missing image, which only
// validation would find, are not reported, so no per-entry check ran.
func TestHugeDefinitionRefusedByCounts(t *testing.T) {
	const n = 80000
	var vols, mounts []string
	for i := range n {
		vols = append(vols, fmt.Sprintf(`{"name":"v%d"}`, i))
		mounts = append(mounts, fmt.Sprintf(`{"sourceVolume":"v%d","containerPath":"/x"}`, n-1-i))
	}
	mounts = append(mounts, `{"sourceVolume":"unknown","containerPath":"/x"}`)
	data := fmt.Sprintf(`{"family":"f","volumes":[%s],"containerDefinitions":[{"name":"a","memory":64,"mountPoints":[%s]}]}`,
		strings.Join(vols, ","), strings.Join(mounts, ","))
	require.Greater(t, len(data), 5_000_000)

	_, err := Parse([]byte(data))
	got := fieldErrors(t, err)
	texts := make([]string, len(got))
	for i, e := range got {
		texts[i] = e.Error()
	}
	assert.Equal(t, []string{
		"volumes: 80000 entries; at most 4096 are allowed",
		"containerDefinitions[0].mountPoints: 80001 entries; at most 4096 are allowed",
	}, texts)
}

// TestValidationIsLinear validates the largest legal definition of the shape that used to be
// quadratic, and one an eighth of its size, and compares the fastest of many runs of each: linear
// work grows about 8 times, quadratic work 64 times (70 measured). The bound (32) leaves room for
// noise; taking the fastest of interleaved runs keeps a loaded machine from making the test flaky.
func TestValidationIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("times validation")
	}
	// The two sizes take turns, so a burst of load on a shared machine slows both alike, and the
	// fastest of many runs of each is the one compared.
	small, large := time.Duration(1<<63-1), time.Duration(1<<63-1)
	smallDef, err := Parse(bigDefinition(MaxEntries / 8))
	require.NoError(t, err)
	largeDef, err := Parse(bigDefinition(MaxEntries))
	require.NoError(t, err)
	run := func(d *Definition) time.Duration {
		runtime.GC() // a collection started by the previous run would count against this one
		start := time.Now()
		require.NoError(t, d.Validate())
		return time.Since(start)
	}
	for range 15 {
		small = min(small, run(smallDef))
		large = min(large, run(largeDef))
	}
	t.Logf("n=%d: %v, n=%d: %v", MaxEntries/8, small, MaxEntries, large)
	assert.Less(t, large, 32*small, "validation time grows faster than its input")
	assert.Less(t, large, 2*time.Second)
}

func TestFieldErrorsAreBounded(t *testing.T) {
	var extra []string
	for i := range 200 {
		extra = append(extra, fmt.Sprintf(`"x%03d": 1`, i))
	}
	_, err := Parse([]byte(doc(strings.Join(extra, ", "), ctr("a", ""))))
	require.ErrorIs(t, err, ErrInvalid)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, maxErrors+1)
	assert.Equal(t, "x049: unknown field", lines[maxErrors-1])
	assert.Equal(t, "and 150 more problems", lines[maxErrors])
}
