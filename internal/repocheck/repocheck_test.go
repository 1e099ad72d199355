package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's top directory (this package is internal/repocheck).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", r, err)
	}
	return r
}

// markdownFiles lists the repository's Markdown files, skipping build output.
func markdownFiles(t *testing.T, r string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != r && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") && !strings.Contains(d.Name(), ".generated.") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// link matches an inline Markdown link or image target, and a reference
// definition ("[x]: target").
var link = regexp.MustCompile(`\]\(([^)\s]+)[^)]*\)|(?m)^\s*\[[^\]]+\]:\s*(\S+)`)

// urlScheme starts a URL (https:, mailto:), which is not a file of ours.
var urlScheme = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)

// TestMarkdownLinksExist: every relative link target of every Markdown file
// exists inside the repository.
func TestMarkdownLinksExist(t *testing.T) {
	r := root(t)
	files := markdownFiles(t, r)
	if len(files) < 3 {
		t.Fatalf("found only %d Markdown files under %s", len(files), r)
	}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(r, f)
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1] + m[2]
			if target == "" || strings.HasPrefix(target, "#") || urlScheme.MatchString(target) {
				continue // an anchor of the same page, or a URL
			}
			p, _, _ := strings.Cut(target, "#")
			abs := filepath.Clean(filepath.Join(filepath.Dir(f), p))
			if inside, _ := filepath.Rel(r, abs); strings.HasPrefix(inside, "..") {
				t.Errorf("%s links outside the repository: %s", rel, target)
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links to a file that does not exist: %s", rel, target)
			}
		}
	}
}

// TestBenchHasNoScaleStep: `make bench` runs no step at 4,000 sessions; the
// README presents those as `make bench-scale`, which does run them.
func TestBenchHasNoScaleStep(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	scale := regexp.MustCompile(`SKC_BENCH_SESSIONS=4000|-mem-n 4000|(^|\s)-scale(\s|$)|PANE_MEM_N=4000`)
	dry := func(target string) string {
		cmd := exec.Command("make", "-n", "-C", root(t), target)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		return string(out)
	}
	if out := dry("bench"); scale.MatchString(out) {
		t.Errorf("make bench has a 4,000-session step: %q\n%s", scale.FindString(out), out)
	}
	if out := dry("bench-scale"); !strings.Contains(out, "SKC_BENCH_SESSIONS=4000") || !strings.Contains(out, "-scale") {
		t.Errorf("make bench-scale lacks its 4,000-session steps:\n%s", out)
	}
}

// cleanEnv is the environment without make's own variables and the bench
// knobs, so that `make -n` shows the Makefile's defaults.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PANE_MEM_N", "PANE_BASELINE", "SKC_BENCH_SESSIONS":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestContractNamedByItsPath: the contract is docs/contract.md; nothing in the
// repository sends a reader to a CONTRACT.md that is not in it.
func TestContractNamedByItsPath(t *testing.T) {
	r := root(t)
	err := filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != r && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md")) || strings.HasSuffix(p, "repocheck_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "CONTRACT.md") {
			rel, _ := filepath.Rel(r, p)
			t.Errorf("%s names CONTRACT.md; the repository's contract is docs/contract.md", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
