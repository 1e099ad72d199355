package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// report is the markdown the bench writes to -out and stdout.
type report struct {
	title, command string
	facts          [][2]string
	rows           []row
	extra          []string // further markdown blocks (breakdown, scale details)
	missed         []string
	errs           []string
}

// row is one line of the results table.
type row struct {
	fig, ours, base, ratio, goal, met string
}

func (r *report) add(x row) { r.rows = append(r.rows, x) }

// judge adds the row and remembers a missed goal.
func (r *report) judge(x row, ok bool, why string) {
	x.met = verdictWord(ok)
	r.add(x)
	if !ok {
		r.missed = append(r.missed, fmt.Sprintf("%s: %s (goal %s)", x.fig, why, x.goal))
	}
}

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", r.title)
	fmt.Fprintf(&b, "Command: `%s`\n\n", r.command)
	b.WriteString("| machine | |\n|---|---|\n")
	for _, f := range r.facts {
		fmt.Fprintf(&b, "| %s | %s |\n", f[0], f[1])
	}
	if len(r.rows) > 0 { // none when a run was skipped
		b.WriteString("\n| figure | ours | baseline (same run) | ratio | goal | |\n|---|---|---|---|---|---|\n")
	}
	for _, x := range r.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", x.fig, x.ours, x.base, x.ratio, x.goal, x.met)
	}
	for _, e := range r.extra {
		b.WriteString("\n" + e + "\n")
	}
	if len(r.missed) > 0 {
		b.WriteString("\nMissed goals:\n\n")
		for _, m := range r.missed {
			b.WriteString("- " + m + "\n")
		}
	}
	if len(r.errs) > 0 {
		b.WriteString("\nErrors (the run stopped early):\n\n")
		for _, e := range r.errs {
			b.WriteString("- " + e + "\n")
		}
	}
	return b.String()
}

// machineFacts are the facts every table carries.
func machineFacts(bin string) [][2]string {
	return [][2]string{
		{"date (UTC)", time.Now().UTC().Format("2006-01-02 15:04")},
		{"nproc", fmt.Sprint(runtime.NumCPU())},
		{"CPU", cpuModel()},
		{"kernel", readTrim("/proc/sys/kernel/osrelease")},
		{"memory", memTotal()},
		{"tmux -V", cmdOut("tmux", "-V")},
		{"go version", cmdOut("go", "version")},
		{"binary", bin + " (" + gitRev() + ")"},
		{"load average at start", loadavg()},
		{"ptys in use / max", readTrim("/proc/sys/kernel/pty/nr") + " / " + readTrim("/proc/sys/kernel/pty/max")},
	}
}

// gitRev names the tree the binary was built from: HEAD, plus "+ uncommitted
// changes" when the working tree differs (several engineers share it).
func gitRev() string {
	rev := cmdOut("git", "rev-parse", "--short", "HEAD")
	if cmdOut("git", "status", "--porcelain", "--untracked-files=no") != "" {
		rev += " + uncommitted changes"
	}
	return "tree " + rev
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func loadavg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func cmdOut(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func cpuModel() string {
	return procField("/proc/cpuinfo", "model name")
}

func memTotal() string {
	return procField("/proc/meminfo", "MemTotal")
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// memAvailableKB is MemAvailable from /proc/meminfo.
func memAvailableKB() int64 {
	var kb int64
	fmt.Sscanf(procField("/proc/meminfo", "MemAvailable"), "%d", &kb)
	return kb
}
