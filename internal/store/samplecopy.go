package store

import (
	"encoding/binary"
	"io"
	"math"
	"strings"
	"time"

	"github.com/schedloop/schedloop"
)

// copySamplesSQL loads gpu_samples in Postgres's binary COPY format, the
// stream sampleCopyReader writes.
var copySamplesSQL = "COPY gpu_samples (" + strings.Join(sampleColumns, ", ") + ") FROM STDIN (FORMAT binary)"

// copyHeader opens a binary COPY stream: the signature, no flags, no
// header extension.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00")

// copyTrailer ends it: a tuple with a field count of -1.
var copyTrailer = []byte{0xff, 0xff}

// y2kMicros is the Unix time of 2000-01-01 UTC in microseconds: binary
// timestamptz counts from there.
const y2kMicros = 946_684_800_000_000

// sampleCopyReader streams samples as a binary COPY body, encoding each row
// straight into the buffer the COPY is sent from. pgx's CopyFrom took one
// []any per row and boxed every field, a dozen allocations a row, which at
// a few hundred thousand rows a second kept the garbage collector busy.
type sampleCopyReader struct {
	// chunks are the rows, in order, as the slices the caller holds them
	// in; chunk and next say which row is encoded next.
	chunks      [][]schedloop.GPUSample
	chunk, next int
	started     bool
	// pending holds what is left of a row or the trailer that did not fit
	// in the previous Read.
	pending []byte
	scratch []byte
}

func (r *sampleCopyReader) Read(p []byte) (int, error) {
	n := 0
	if !r.started {
		r.started = true
		r.pending = copyHeader
	}
	for n < len(p) {
		if len(r.pending) > 0 {
			c := copy(p[n:], r.pending)
			r.pending = r.pending[c:]
			n += c
			continue
		}
		for r.chunk < len(r.chunks) && r.next == len(r.chunks[r.chunk]) {
			r.chunk, r.next = r.chunk+1, 0
		}
		if r.chunk > len(r.chunks) {
			if n == 0 {
				return 0, io.EOF
			}
			return n, nil
		}
		if r.chunk == len(r.chunks) {
			r.chunk++
			r.pending = copyTrailer
			continue
		}
		row := &r.chunks[r.chunk][r.next]
		r.next++
		if size := sampleRowSize(row); size <= len(p)-n {
			n += len(appendSampleRow(p[n:n], row))
		} else {
			r.scratch = appendSampleRow(r.scratch[:0], row)
			r.pending = r.scratch
		}
	}
	return n, nil
}

// sampleRowSize is the encoded size of one row: a field count, a length per
// field and the values.
func sampleRowSize(s *schedloop.GPUSample) int {
	return 2 + 4*len(sampleColumns) + 8 + 2 + 6*4 +
		len(s.GPUUUID) + len(s.Node) + len(s.PodNamespace) + len(s.PodName) + len(s.Container) +
		len(s.GPUInstance) + len(s.GPUInstanceProfile)
}

// appendSampleRow appends one tuple in sampleColumns order, each field in
// its column type's binary form: timestamptz as microseconds since 2000,
// text as its bytes, smallint, and real as IEEE 754 single precision.
func appendSampleRow(b []byte, s *schedloop.GPUSample) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(sampleColumns)))
	b = binary.BigEndian.AppendUint32(b, 8)
	b = binary.BigEndian.AppendUint64(b, uint64(timestamptzMicros(s.Time)))
	b = appendText(b, s.GPUUUID)
	b = appendText(b, s.Node)
	b = binary.BigEndian.AppendUint32(b, 2)
	b = binary.BigEndian.AppendUint16(b, uint16(int16(s.GPUIndex)))
	b = appendText(b, s.PodNamespace)
	b = appendText(b, s.PodName)
	b = appendText(b, s.Container)
	for _, v := range [...]float64{s.GPUUtil, s.GrEngineActive, s.SMActive, s.FBUsedMiB, s.PowerWatts} {
		b = appendReal(b, v)
	}
	b = appendText(b, s.GPUInstance)
	b = appendText(b, s.GPUInstanceProfile)
	// A whole GPU's share is 0 in GPUSample and 1 in the column.
	share := s.ComputeShare
	if share == 0 {
		share = 1
	}
	return appendReal(b, share)
}

func appendReal(b []byte, v float64) []byte {
	b = binary.BigEndian.AppendUint32(b, 4)
	return binary.BigEndian.AppendUint32(b, math.Float32bits(float32(v)))
}

func appendText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// timestamptzMicros is t in Postgres's binary timestamptz form, truncated
// to the microsecond as Postgres stores it.
func timestamptzMicros(t time.Time) int64 {
	return t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - y2kMicros
}
