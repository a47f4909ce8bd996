package collector

import (
	"crypto/rand"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/schedloop/schedloop"
)

// errSpoolFull says a segment would take the spool over its byte limit.
var errSpoolFull = errors.New("spool is full")

// spool keeps batches of samples on disk, one file per batch, oldest first.
// It survives restarts: a collector that stops while Postgres is away writes
// what it holds here and sends it on its next start.
type spool struct {
	dir      string
	maxBytes int64

	mu      sync.Mutex
	next    uint64
	segs    []segment // oldest first
	bytes   int64
	samples int64
}

type segment struct {
	name    string
	bytes   int64
	samples int
}

// id names the segment's batch for exactly-once storage: the file name
// without its suffix, unique across spools and restarts since it carries a
// random token.
func (s segment) id() string { return "spool/" + strings.TrimSuffix(s.name, segSuffix) }

// parseSegmentName reads <seq hex>-<samples>[-<token>].spool.
func parseSegmentName(name string) (seq uint64, samples int, ok bool) {
	parts := strings.Split(strings.TrimSuffix(name, segSuffix), "-")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(parts[0], "%x", &seq); err != nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(parts[1], "%d", &samples); err != nil || samples < 0 {
		return 0, 0, false
	}
	return seq, samples, true
}

const segSuffix = ".spool"

// openSpool opens (creating if needed) the spool in dir and indexes the
// segments a previous run left.
func openSpool(dir string, maxBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create spool directory %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read spool directory %s: %w", dir, err)
	}
	s := &spool{dir: dir, maxBytes: maxBytes}
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			os.Remove(filepath.Join(dir, name)) // a write cut short
			continue
		}
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		seq, n, ok := parseSegmentName(name)
		if !ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		s.segs = append(s.segs, segment{name: name, bytes: info.Size(), samples: n})
		s.bytes += info.Size()
		s.samples += int64(n)
		s.next = max(s.next, seq+1)
	}
	slices.SortFunc(s.segs, func(a, b segment) int { return strings.Compare(a.name, b.name) })
	return s, nil
}

// put writes one batch as a new segment, or returns errSpoolFull. A batch
// that already has an id (one whose COPY may have committed unacknowledged
// before the collector stopped) keeps it: the id follows the samples in the
// file, where a reader that predates it stops reading, and it is what the
// segment is stored under.
func (s *spool) put(id string, batch []schedloop.GPUSample) error {
	s.mu.Lock()
	seq := s.next
	s.next++
	s.mu.Unlock()
	var token [8]byte
	if _, err := rand.Read(token[:]); err != nil {
		return fmt.Errorf("spool %d samples: %w", len(batch), err)
	}
	name := fmt.Sprintf("%016x-%d-%s%s", seq, len(batch), hex.EncodeToString(token[:]), segSuffix)
	tmp := filepath.Join(s.dir, name+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("spool %d samples: %w", len(batch), err)
	}
	enc := gob.NewEncoder(f)
	err = enc.Encode(batch)
	if err == nil && id != "" {
		err = enc.Encode(id)
	}
	size := int64(0)
	if info, serr := f.Stat(); serr == nil {
		size = info.Size()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("spool %d samples: %w", len(batch), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes+size > s.maxBytes {
		os.Remove(tmp)
		return errSpoolFull
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("spool %d samples: %w", len(batch), err)
	}
	s.segs = append(s.segs, segment{name: name, bytes: size, samples: len(batch)})
	s.bytes += size
	s.samples += int64(len(batch))
	return nil
}

// oldest reads the oldest segment and the id its batch is stored under;
// ok is false when the spool is empty.
func (s *spool) oldest() (seg segment, id string, batch []schedloop.GPUSample, ok bool, err error) {
	s.mu.Lock()
	if len(s.segs) == 0 {
		s.mu.Unlock()
		return segment{}, "", nil, false, nil
	}
	seg = s.segs[0]
	s.mu.Unlock()
	f, err := os.Open(filepath.Join(s.dir, seg.name))
	if err != nil {
		return seg, "", nil, true, fmt.Errorf("read spool segment %s: %w", seg.name, err)
	}
	defer f.Close()
	dec := gob.NewDecoder(f)
	if err := dec.Decode(&batch); err != nil {
		return seg, "", nil, true, fmt.Errorf("decode spool segment %s: %w", seg.name, err)
	}
	switch err := dec.Decode(&id); {
	case errors.Is(err, io.EOF):
		id = seg.id()
	case err != nil:
		return seg, "", nil, true, fmt.Errorf("decode spool segment %s: batch id: %w", seg.name, err)
	case id == "":
		return seg, "", nil, true, fmt.Errorf("decode spool segment %s: empty batch id", seg.name)
	}
	return seg, id, batch, true, nil
}

// remove deletes a segment once its samples are stored (or unreadable).
func (s *spool) remove(seg segment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.segs, func(x segment) bool { return x.name == seg.name })
	if i < 0 {
		return
	}
	os.Remove(filepath.Join(s.dir, seg.name))
	s.segs = slices.Delete(s.segs, i, i+1)
	s.bytes -= seg.bytes
	s.samples -= int64(seg.samples)
}

func (s *spool) stats() (bytes, samples int64) {
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes, s.samples
}
