package harness

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// processTB lets the apiserver's test-server code, which reports through a
// testing.TB-shaped interface, run inside a program as well as a test: logs
// go to a writer, Fatal unwinds to Start, cleanups run at Stop.
type processTB struct {
	name string
	dir  string
	log  io.Writer

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	temps    int
}

// fatal is the panic value Fatal/FailNow unwind with.
type fatal struct{ msg string }

func (t *processTB) logf(format string, args ...any) {
	if t.log != nil {
		fmt.Fprintf(t.log, t.name+": "+format+"\n", args...)
	}
}

func (t *processTB) Attr(key, value string)   {}
func (t *processTB) Chdir(dir string)         { panic(fatal{"Chdir is not supported outside tests"}) }
func (t *processTB) Setenv(key, value string) { panic(fatal{"Setenv is not supported outside tests"}) }
func (t *processTB) Helper()                  {}
func (t *processTB) Name() string             { return t.name }
func (t *processTB) Log(args ...any)          { t.logf("%s", fmt.Sprint(args...)) }
func (t *processTB) Logf(f string, a ...any)  { t.logf(f, a...) }
func (t *processTB) Error(args ...any)        { t.fail(); t.logf("error: %s", fmt.Sprint(args...)) }
func (t *processTB) Errorf(f string, a ...any) {
	t.fail()
	t.logf("error: "+f, a...)
}
func (t *processTB) Fail()                     { t.fail() }
func (t *processTB) FailNow()                  { t.fail(); panic(fatal{"FailNow"}) }
func (t *processTB) Fatal(args ...any)         { t.fail(); panic(fatal{fmt.Sprint(args...)}) }
func (t *processTB) Fatalf(f string, a ...any) { t.fail(); panic(fatal{fmt.Sprintf(f, a...)}) }
func (t *processTB) Skip(args ...any)          { panic(fatal{"skip: " + fmt.Sprint(args...)}) }
func (t *processTB) Skipf(f string, a ...any)  { panic(fatal{"skip: " + fmt.Sprintf(f, a...)}) }
func (t *processTB) SkipNow()                  { panic(fatal{"skip"}) }
func (t *processTB) Skipped() bool             { return false }

func (t *processTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *processTB) fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *processTB) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

// runCleanups runs the registered cleanups, last first.
func (t *processTB) runCleanups() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func (t *processTB) TempDir() string {
	t.mu.Lock()
	t.temps++
	dir := filepath.Join(t.dir, fmt.Sprintf("tmp-%d", t.temps))
	t.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		panic(fatal{fmt.Sprintf("make temp dir: %v", err)})
	}
	return dir
}

// recoverFatal turns a Fatal raised by the wrapped code into *err.
func (t *processTB) recoverFatal(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(fatal)
		if !ok {
			panic(r)
		}
		*err = fmt.Errorf("%s", f.msg)
	}
}
