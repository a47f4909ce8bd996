package store

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
)

// readAllWith drains r through a buffer of size n, as pgconn reads it.
func readAllWith(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, n)
	for range 1 << 20 {
		k, err := r.Read(buf)
		out.Write(buf[:k])
		if err == io.EOF {
			return out.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			t.Fatalf("Read(%d bytes) returned 0 bytes and no error", n)
		}
	}
	t.Fatal("stream never ended")
	return nil
}

func TestSampleCopyStreamIsTheSameWhateverTheReadSize(t *testing.T) {
	rows := []schedloop.GPUSample{
		{Time: time.Date(2026, 5, 1, 0, 0, 0, 123_456_789, time.UTC), GPUUUID: "GPU-a", Node: "n1", GPUIndex: 3,
			PodNamespace: "ml", PodName: "train-0", Container: "main", GPUUtil: 0.5, PowerWatts: 312.25},
		{Time: time.Date(1999, 12, 31, 23, 59, 59, 999_999_000, time.UTC), GPUUUID: "GPU-b", PodName: strings.Repeat("p", 70_000)},
		{Time: time.Unix(0, 0), GPUUUID: "GPU-ü"},
	}
	want := append([]byte(nil), copyHeader...)
	for i := range rows {
		want = appendSampleRow(want, &rows[i])
	}
	want = append(want, copyTrailer...)
	splits := map[string][][]schedloop.GPUSample{
		"one slice":        {rows},
		"slices with gaps": {nil, rows[:1], {}, rows[1:2], rows[2:], nil},
		"one slice a row":  {rows[:1], rows[1:2], rows[2:]},
	}
	for name, chunks := range splits {
		for _, n := range []int{1, 2, 7, 64, 151, 65_531, 1 << 20} {
			got := readAllWith(t, &sampleCopyReader{chunks: chunks}, n)
			if !bytes.Equal(got, want) {
				t.Errorf("%s, read %d bytes at a time: stream of %d bytes differs from the %d bytes encoded at once", name, n, len(got), len(want))
			}
		}
	}
	if got := readAllWith(t, &sampleCopyReader{}, 64); !bytes.Equal(got, append(append([]byte(nil), copyHeader...), copyTrailer...)) {
		t.Errorf("no rows: stream %q, want header and trailer only", got)
	}
}

func TestSampleRowSizeIsWhatIsAppended(t *testing.T) {
	s := schedloop.GPUSample{Time: time.Now(), GPUUUID: "GPU-1234", Node: "node-a", PodNamespace: "ns", PodName: "pod", Container: "c"}
	if got, want := len(appendSampleRow(nil, &s)), sampleRowSize(&s); got != want {
		t.Errorf("appended %d bytes, sampleRowSize says %d", got, want)
	}
}

func TestTimestamptzMicros(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Date(2000, 1, 1, 0, 0, 1, 1_999, time.UTC), 1_000_001},
		{time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC), -1_000_000},
		{time.Date(2000, 1, 1, 1, 0, 0, 0, time.FixedZone("CET", 3600)), 0},
	} {
		if got := timestamptzMicros(c.t); got != c.want {
			t.Errorf("timestamptzMicros(%s) = %d, want %d", c.t, got, c.want)
		}
	}
}
