package collector_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/schedloop/schedloop/internal/harness/exporter"
)

// farmEnv carries a farm's description to the helper process.
const farmEnv = "SCHEDLOOP_EXPORTER_FARM"

// TestExporterFarmProcess is the helper process of startFarm, not a test of
// its own: with farmEnv set it serves that farm, prints its URLs and a line
// "ready", and serves until its standard input closes. Without farmEnv it
// does nothing.
func TestExporterFarmProcess(t *testing.T) {
	spec := os.Getenv(farmEnv)
	if spec == "" {
		return
	}
	var f exporter.Farm
	if err := json.Unmarshal([]byte(spec), &f); err != nil {
		t.Fatalf("%s=%q: %v", farmEnv, spec, err)
	}
	urls, stop, err := f.Serve()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	fmt.Println(strings.Join(urls, "\n"))
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startFarm serves f from a separate process, so that the CPU the stand-in
// exporters take is not counted as the collector's, and returns its URLs.
func startFarm(tb testing.TB, f exporter.Farm) []string {
	tb.Helper()
	spec, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExporterFarmProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), farmEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start the exporter farm: %v", err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	var urls []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return urls
		}
		if strings.HasPrefix(line, "http://") {
			urls = append(urls, line)
		}
	}
	tb.Fatalf("exporter farm exited before it was ready: %v", sc.Err())
	return nil
}
