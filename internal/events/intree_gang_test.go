package events

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/schedloop/schedloop"
)

// inTreeGangSource is the Kubernetes GangScheduling plugin's source in the
// module cache, at the k8s.io/kubernetes version go.mod requires.
func inTreeGangSource(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("locate module k8s.io/kubernetes (go mod download): %q, %v", dir, err)
	}
	return filepath.Join(dir, "pkg", "scheduler", "framework", "plugins", "gangscheduling", "gangscheduling.go")
}

// gangStatusTexts are the literal messages and format strings the plugin
// gives fwk.NewStatus, with the status code each is given with.
func gangStatusTexts(t *testing.T, path string) map[string]string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the in-tree plugin's source: %v", err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "NewStatus" {
			return true
		}
		code := ""
		if sel, ok := call.Args[0].(*ast.SelectorExpr); ok {
			code = sel.Sel.Name
		}
		msg := call.Args[1]
		if c, ok := msg.(*ast.CallExpr); ok && len(c.Args) > 0 { // fmt.Sprintf(format, ...)
			msg = c.Args[0]
		}
		if lit, ok := msg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out[s] = code
			}
		}
		return true
	})
	return out
}

var verb = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z]`)

// instantiate fills a format's verbs the way the plugin does: counts for
// %d, a quoted group name for %q, an error text for %v and %s.
func instantiate(format string) string {
	return verb.ReplaceAllStringFunc(format, func(v string) string {
		switch v[len(v)-1] {
		case 'd':
			return "4"
		case 'q':
			return `"train"`
		}
		return "pod group ml/train not found"
	})
}

// Every waiting and refusal message in the Kubernetes 1.37 GangScheduling
// plugin's source, as a FailedScheduling event carries it (the pod-group
// cycle reports the plugin's status message as is), is a gang wait: a
// composite pod group not yet in the scheduler's state holds its pods as a
// pod group not yet seen does. A hierarchy snapshot that fails to build for
// another error ("failed to build hierarchy snapshot: %v") is not.
// The messages are read from the plugin's source, so a change upstream
// fails here rather than passing as "other" unseen.
func TestInTreeGangSchedulingReasons(t *testing.T) {
	texts := gangStatusTexts(t, inTreeGangSource(t))
	if len(texts) < 5 {
		t.Fatalf("found %d status messages in the plugin's source, want its waits and refusals: %v", len(texts), texts)
	}
	for format, code := range texts {
		msg := instantiate(format)
		got := ParseFailedScheduling(msg).Category
		want := schedloop.WaitGangIncomplete
		if format == "failed to build hierarchy snapshot: %v" {
			want = schedloop.WaitOther
		}
		if got != want {
			t.Errorf("%s %q: category %s, want %s", code, msg, got, want)
		}
		t.Logf("%-30s %-60q -> %s", code, msg, got)
	}
}
