package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// The warm pool (Config.PoolSize): standby panes spawned ahead of any create —
// pty, fork and the pane helper already done, remain-on-exit set — each
// running `helper --home H --standby TOKEN` in an untagged session named
// skc-standby-TOKEN, waiting for a hand-off. A create claims one instead of
// sending new-session (pool_claim.go): it records the standby as its spawned
// pane in the fence (attempt name, tmux id, pane pid: all known before the
// claim), then renames and tags it in one round trip while it writes the
// standby's hand-off (its reservation, in a file only the daemon writes), and
// publishes and releases in one transaction; the daemon records the
// standby's start for it (handOff), and the standby was placed in its own
// cgroup, the generation's once claimed, at its spawn (place). The standby
// then waits at the pane helper's gate — its generation published, with its
// own pid as the pane — and execs the agent with the spec's argv, cwd and
// env. A standby is never tagged before the fence records it as the
// attempt's pane, and no create ever sees one as a session: it is unmanaged
// (no tags) and not in the fence until claimed.
//
// Never handed out twice: a standby leaves the free list under the pool's
// lock when claimed, and a restarted daemon removes every skc-standby-*
// session it finds before spawning its own (a standby the dead daemon had
// recorded as an attempt's pane is that attempt's session, resolved by
// recovery from live tmux by its $id, or by the attempt name once renamed).

// standbyPrefix names standby sessions; attempt names are skc-<hex digest>-…,
// so no attempt can wear it.
const standbyPrefix = "skc-standby-"

// poolRetry is how long the pool waits before trying again after a failed
// spawn (tmux down or refusing): it must not spin against a dead server.
const poolRetry = time.Second

// standby is one spawned standby pane.
type standby struct {
	token   string
	life    tmuxctl.ServerLife
	tmuxID  string
	paneID  string
	panePID int
	// paneStart is the pane process's start time, read when it was spawned:
	// a claim records it as the generation's hold without a /proc read.
	paneStart uint64
	// incarnation is the pane process's, read at its spawn too: the claim
	// records it as the standby's start (a process's incarnation never
	// changes; a standby that died meanwhile is found by take or by tmux).
	incarnation string
	created     time.Time
	// cgroup is the cgroup the daemon placed the standby in at its spawn
	// (place; "" when there is none): a claim makes it the
	// generation's, so the agent is born inside without a move on the
	// create's path (a move waits for an RCU grace period, ~15 ms).
	cgroup string
	// confirmed is cgroup once /proc showed the standby inside it, read at
	// its spawn ("" otherwise): the claim's start record names it (see
	// standbyStart). Only root or the daemon moves a process between
	// cgroups, so a look on the claim's path (a cold /proc read, ~0.1 ms of
	// a pooled create) would tell nothing more.
	confirmed string
	// pidfd refers to the pane process itself, opened at its spawn once its
	// start time was read (nil without pidfds, kernels before 5.3): take
	// asks it whether the standby still runs with one poll(2) instead of a
	// cold /proc read on the create's path. Copies of a standby share it;
	// it is closed when the standby is claimed or removed (and by the
	// runtime's finalizer for a copy that was dropped).
	pidfd *os.File
}

// running reports whether the standby's process has not exited — not even
// as a zombie tmux has yet to reap, which kill(pid, 0) would call alive: a
// create would publish a generation whose agent never starts.
func (sb standby) running() bool {
	if sb.pidfd != nil {
		fds := []unix.PollFd{{Fd: int32(sb.pidfd.Fd()), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err == nil {
			return n == 0 // readable once the process exited
		}
	}
	return proctree.LifeRunning(sb.panePID, sb.paneStart)
}

// closePidfd closes the standby's pidfd (claimed, or being removed).
func (sb standby) closePidfd() {
	if sb.pidfd != nil {
		_ = sb.pidfd.Close()
	}
}

// openPidfd opens a pidfd for pid and keeps it only if pid is still the
// process that started at start (read before the open): the pidfd then
// names that process for good, whatever later reuses the pid.
func openPidfd(pid int, start uint64) *os.File {
	if start == 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	if !proctree.LifeRunning(pid, start) {
		_ = f.Close()
		return nil
	}
	return f
}

// pool keeps up to size standbys spawned. It is nil when the pool is off, so
// a daemon without one pays nothing.
type pool struct {
	m    *Manager
	size int
	dir  string        // the hand-off files' directory (0700, in the home)
	kick chan struct{} // a claim happened: refill

	mu   sync.Mutex
	free []standby // spawned, not claimed; filled only after the sweep
	dead []standby // found dead by take, or discarded: fill removes their sessions
	// emptied are cgroups of standbys whose sessions were killed: removed
	// once their process is gone (rmdir fails while it holds one).
	emptied []string
	claims  int  // creates served by a standby (metrics, tests)
	closed  bool // Shutdown began: no more standbys
}

func newPool(m *Manager, size int) *pool {
	if size <= 0 {
		return nil
	}
	p := &pool{m: m, size: size, dir: filepath.Join(m.cfg.Home, "pool"), kick: make(chan struct{}, 1)}
	if r := m.cfg.Metrics; r != nil {
		r.GaugeFunc("skc_pool_standbys", "Warm pool standby panes spawned and free to claim.",
			func() float64 { return float64(m.PoolStats().Ready) })
		r.CounterFunc("skc_pool_claims_total", "Creates served by a warm pool standby instead of new-session.",
			func() float64 { return float64(m.PoolStats().Claims) })
	}
	return p
}

// take removes a live standby of the current server life from the free list;
// ok false means none is ready (the create sends new-session instead).
func (p *pool) take(life tmuxctl.ServerLife) (standby, bool) {
	if p == nil {
		return standby{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// No refill here: its new-session would queue in tmux (one thread) ahead
	// of this create's own commands. The saga asks for it once it answered.
	for len(p.free) > 0 {
		sb := p.free[0]
		p.free = p.free[1:]
		if sb.life == life && sb.running() {
			return sb, true
		}
		// fill removes its session (of this life: one of a server that died
		// went with it), its hand-off file and its cgroup. Dropped here
		// without it, a dead server's standbys left both behind (found
		// outside-in: a create right after the server's death).
		p.dead = append(p.dead, sb)
	}
	return standby{}, false
}

// served counts a create served by a standby (renamed and tagged as the
// attempt's), once: skc_pool_claims_total is a counter, so a standby taken
// and given back, discarded, or found gone at the rename is not counted.
func (p *pool) served() {
	p.mu.Lock()
	p.claims++
	p.mu.Unlock()
}

// giveBack returns a standby taken off the free list that nothing recorded
// (its create's reservation declined or refused the claim) to the front of
// the list: it was never handed out, so it can be, once.
// After Shutdown began it is killed as close kills the free ones.
func (p *pool) giveBack(sb standby) {
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.free = append([]standby{sb}, p.free...)
	}
	p.mu.Unlock()
	if closed {
		p.kill(context.Background(), []standby{sb})
	}
}

// discard hands a standby taken off the free list but never claimed (the
// claim's first fence write failed) to the next refill, which removes its
// session: it is not handed out again.
func (p *pool) discard(sb standby) {
	p.mu.Lock()
	p.dead = append(p.dead, sb)
	p.mu.Unlock()
}

// removeDead kills the sessions of standbys whose pane process died: their
// sessions stay (remain-on-exit) until removed. Errors are left to the
// next daemon's sweep, which removes every standby.
func (p *pool) removeDead(ctx context.Context, life tmuxctl.ServerLife, dead []standby) {
	for _, sb := range dead {
		sb.closePidfd()
		if sb.life == life {
			_, _ = p.m.commandIn(ctx, life, "kill-session", "-t", sb.tmuxID)
		}
		p.dropHandoff(sb.token)
		p.forgetCgroup(sb.cgroup)
	}
}

// refill asks the pool's loop to spawn what is missing; a create calls it
// when it has answered (saga), so the spawn never delays a create's commands.
func (p *pool) refill() {
	if p == nil {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run sweeps the standbys a previous daemon left, then keeps the pool full
// until ctx ends.
func (p *pool) run(ctx context.Context) {
	if err := p.m.census.WaitSynced(ctx); err != nil {
		return
	}
	for !p.sweep(ctx) {
		if !sleepCtx(ctx, poolRetry) {
			return
		}
	}
	t := time.NewTicker(5 * poolRetry)
	defer t.Stop()
	for {
		if !p.fill(ctx) && !sleepCtx(ctx, poolRetry) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-t.C: // a server that died and came back: standbys of the old life are gone
			p.sweepClaimedHandoffs()
		}
	}
}

// sweepTries bounds how often a daemon with the pool off tries to sweep an
// earlier pool's standbys (poolRetry apart) before it gives up and says so.
const sweepTries = 30

// sweepStandbys is the sweep of a daemon whose pool is off: the standbys an
// earlier `serve --pool N` left (killed, or stopped while one was being
// claimed) are processes of ours doing nothing, in sessions no lookup shows,
// and the pool that would have removed them is not there. One pass once the
// census synced, like the pool's own (sweep); then nothing of the pool runs.
func (m *Manager) sweepStandbys(ctx context.Context) {
	p := &pool{m: m, dir: filepath.Join(m.cfg.Home, "pool")}
	if ents, err := os.ReadDir(p.dir); err != nil || len(ents) == 0 {
		// Every standby has its hand-off file from its spawn until it is
		// claimed or removed: no file, no standby (nor anything to do).
		return
	}
	if err := m.census.WaitSynced(ctx); err != nil {
		return
	}
	if !m.standbysListed() {
		// Nothing in tmux (the census lists every session once synced):
		// only the files of a pool killed when its server was gone too.
		p.sweepHandoffs()
		_ = os.Remove(p.dir)
		return
	}
	for try := 1; !p.sweep(ctx); try++ {
		if try == sweepTries {
			m.log.Warn().Msg("standbys of an earlier pool not swept: tmux did not answer")
			return
		}
		if !sleepCtx(ctx, poolRetry) {
			return
		}
	}
	p.awaitEmptied(ctx)
	_ = os.Remove(p.dir) // only when empty: a live standby's file is its only way to its reservation
}

// standbysListed reports whether the census lists a standby session.
func (m *Manager) standbysListed() bool {
	snap := m.census.Snapshot()
	for i := range snap.Sessions {
		if isStandby(&snap.Sessions[i]) {
			return true
		}
	}
	return false
}

// fill spawns standbys until the pool holds size of the current life; false
// when a spawn failed.
func (p *pool) fill(ctx context.Context) bool {
	for {
		life, ok := p.m.serverLife()
		if !ok {
			return false
		}
		p.mu.Lock()
		kept := p.free[:0]
		dead := p.dead
		p.dead = nil
		for _, sb := range p.free {
			switch {
			case sb.life != life: // its server is gone, and the session with it
				dead = append(dead, sb) // removeDead kills no session of another life
			case sb.running():
				kept = append(kept, sb)
			default:
				dead = append(dead, sb)
			}
		}
		if len(kept) > p.size {
			// Standbys given back (a claim undone) after a refill had
			// replaced them: the pool is N, not N plus what came back.
			dead = append(dead, kept[p.size:]...)
			kept = kept[:p.size]
		}
		p.free = kept
		n, closed := len(p.free), p.closed
		p.mu.Unlock()
		p.removeDead(ctx, life, dead)
		p.removeEmptied()
		if n >= p.size || closed || ctx.Err() != nil {
			return true
		}
		p.awaitQuiet(ctx)
		sb, err := p.spawn(ctx, life)
		if err != nil {
			p.m.log.Debug().Err(err).Msg("standby not spawned")
			return false
		}
		p.m.fault.hit(FaultStandbySpawned)
		p.mu.Lock()
		closed = p.closed
		if !closed {
			p.free = append(p.free, sb)
		}
		p.mu.Unlock()
		if closed {
			p.kill(ctx, []standby{sb})
			return true
		}
	}
}

// poolQuietWait bounds how long a refill waits for the creates in flight to
// answer before it spawns anyway: under a steady stream of creates the pool
// must still refill.
const poolQuietWait = 500 * time.Millisecond

// awaitQuiet waits, up to poolQuietWait, until no create is in flight. A
// spawn is a new-session — tmux's fork, pty and exec, in its one thread —
// and in a burst of creates every one of them would queue ahead of the
// burst's own renames and tags: the burst is what the pool is for, so the
// refill comes after it.
func (p *pool) awaitQuiet(ctx context.Context) {
	deadline := time.Now().Add(poolQuietWait)
	for len(p.m.slots) > 0 && time.Now().Before(deadline) {
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return
		}
	}
}

// spawn starts one standby in life.
func (p *pool) spawn(ctx context.Context, life tmuxctl.ServerLife) (standby, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return standby{}, err
	}
	sb := standby{token: hex.EncodeToString(b[:]), life: life}
	args := []string{"new-session", "-d", "-P", "-F",
		"#{session_id}\t#{pane_pid}\t#{pane_id}\t#{session_created}",
		"-s", standbyPrefix + sb.token, "-x", "200", "-y", "50", "--",
		p.m.cfg.HelperPath, "helper", "--home", p.m.cfg.Home, "--standby", sb.token}
	reply, err := p.m.commandIn(ctx, life, args...)
	if err != nil {
		return sb, err
	}
	sp, err := parseSpawn(reply)
	if err != nil {
		return sb, err
	}
	sb.tmuxID, sb.panePID, sb.paneID, sb.created = sp.id, sp.panePID, sp.paneID, sp.created
	// remain-on-exit now, not at the claim: it is the same for every
	// generation (tag), and one command fewer between a claim and its
	// publication. A standby without it is not handed out.
	if _, err := p.m.commandIn(ctx, life, "set-option", "-w", "-t", sb.tmuxID, "remain-on-exit", "on"); err != nil {
		_, _ = p.m.commandIn(ctx, life, "kill-session", "-t", sb.tmuxID)
		return sb, fmt.Errorf("standby remain-on-exit: %w", err)
	}
	sb.paneStart, _ = proctree.ChildStartTime(sb.panePID, life.PID)
	if sb.paneStart != 0 {
		sb.incarnation, _ = fence.IncarnationOf(sb.panePID, sb.paneStart)
	}
	sb.pidfd = openPidfd(sb.panePID, sb.paneStart)
	sb.cgroup = p.place(sb)
	if sb.cgroup != "" && proctree.InCgroup(sb.panePID, sb.cgroup) {
		sb.confirmed = sb.cgroup
	}
	p.prepareHandoff(sb.token)
	return sb, nil
}

// standbyCgroupPrefix names a standby's cgroup under the daemon's base:
// base/gen-sb-TOKEN. It is a generation's cgroup once claimed, so it wears
// the generations' prefix (recovery's sweep removes empty ones).
const standbyCgroupPrefix = "gen-sb-"

// place puts a just spawned standby in a cgroup of its own, where the agent it
// is handed will run; "" when the daemon has no cgroup base or the move
// failed (the claim's generation is then held by its pane's session, as on
// a host without cgroups).
func (p *pool) place(sb standby) string {
	if p.m.cgroupBase == "" {
		return ""
	}
	dir := filepath.Join(p.m.cgroupBase, standbyCgroupPrefix+sb.token)
	if err := proctree.PlaceInCgroup(dir, sb.panePID); err != nil {
		p.m.log.Info().Err(err).Str("cgroup", dir).Msg("standby not placed in a cgroup; its generation will be held by its session")
		return ""
	}
	return dir
}

// forgetCgroup hands the cgroup of a standby killed or found gone (claimed or
// not) to removeEmptied, which removes it once empty; "" is nothing.
func (p *pool) forgetCgroup(dir string) {
	if p == nil || dir == "" {
		return
	}
	p.mu.Lock()
	p.emptied = append(p.emptied, dir)
	p.mu.Unlock()
}

// removeEmptied removes the cgroups of killed standbys whose process is gone,
// keeping the others for the next pass; it returns how many it kept.
func (p *pool) removeEmptied() int {
	p.mu.Lock()
	dirs := p.emptied
	p.emptied = nil
	p.mu.Unlock()
	var keep []string
	for _, d := range dirs {
		if proctree.RemoveCgroup(d) != nil {
			keep = append(keep, d)
		}
	}
	if keep != nil {
		p.mu.Lock()
		p.emptied = append(p.emptied, keep...)
		p.mu.Unlock()
	}
	return len(keep)
}

// sweep removes what a previous daemon's pool left: every skc-standby-*
// session (never handed out: this daemon never spawned them) and every
// hand-off file whose standby is gone. It reports whether tmux answered.
func (p *pool) sweep(ctx context.Context) bool {
	life, ok := p.m.serverLife()
	if !ok {
		return false
	}
	reply, err := p.m.commandIn(ctx, life, "list-sessions", "-F", "#{session_id}\t#{session_name}")
	if err != nil {
		return false
	}
	for _, l := range reply.Lines {
		id, name, _ := strings.Cut(l, "\t")
		if strings.HasPrefix(name, standbyPrefix) {
			if err := p.m.killConfirm(ctx, life, id); err != nil {
				return false
			}
			if tok := strings.TrimPrefix(name, standbyPrefix); p.m.cgroupBase != "" && validToken(tok) {
				p.forgetCgroup(filepath.Join(p.m.cgroupBase, standbyCgroupPrefix+tok))
			}
		}
	}
	p.sweepHandoffs()
	return true
}

// sweepHandoffs removes the hand-off files whose standby process is gone (a
// claim undone, or a daemon killed, before the standby read its file). A file
// of a live standby stays: it is that standby's only way to its reservation.
func (p *pool) sweepHandoffs() {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		h, err := readHandoff(filepath.Join(p.dir, e.Name()))
		if err != nil || !proctree.LifeRunning(h.panePID, 0) {
			_ = os.Remove(filepath.Join(p.dir, e.Name()))
		}
	}
}

// sweepClaimedHandoffs removes, while the pool runs, the written hand-off
// files whose standby process is gone: a claimed standby stopped (a restart
// or kill right after its create) before it read its file never removes it,
// and nothing else would until the next daemon's sweep. The files prepared
// for free standbys (empty until a claim) and those being written stay.
func (p *pool) sweepClaimedHandoffs() {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		path := filepath.Join(p.dir, e.Name())
		if h, err := readHandoff(path); err == nil && !proctree.LifeRunning(h.panePID, 0) {
			_ = os.Remove(path)
		}
	}
}

// close kills the free standbys at shutdown: the next daemon would remove
// them anyway, and until then they are processes of ours doing nothing.
func (p *pool) close(ctx context.Context) {
	if p == nil {
		return
	}
	p.mu.Lock()
	free := p.free
	p.free, p.closed = nil, true
	p.mu.Unlock()
	p.kill(ctx, free)
}

// closeCgroupWait bounds how long Shutdown waits for killed standbys to exit
// so that their cgroups, and then the daemon's base, can be removed.
const closeCgroupWait = time.Second

// kill kills standbys at shutdown and removes the cgroups waiting for removal
// (theirs among them) once their processes are gone (they exit on the
// hangup), within closeCgroupWait; a cgroup still held then is left to the
// next start's sweep.
func (p *pool) kill(ctx context.Context, sbs []standby) {
	for _, sb := range sbs {
		sb.closePidfd()
		_, _ = p.m.commandIn(ctx, sb.life, "kill-session", "-t", sb.tmuxID)
		p.dropHandoff(sb.token)
		p.forgetCgroup(sb.cgroup)
	}
	p.awaitEmptied(ctx)
}

// awaitEmptied removes the cgroups of killed standbys as their processes
// exit (on the hangup), within closeCgroupWait; one still held then is left
// to the next start's sweep.
func (p *pool) awaitEmptied(ctx context.Context) {
	deadline := time.Now().Add(closeCgroupWait)
	for p.removeEmptied() > 0 && time.Now().Before(deadline) {
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return
		}
	}
}

// handoff is what a claim hands its standby: the reservation evidence the
// pane helper otherwise gets on its command line.
type handoff struct {
	resID      string
	generation uint64
	cgroup     string
	panePID    int // the standby's own pid: it checks, and the sweep reads it
}

// handoffEnd is a hand-off file's last line: the file is written in place,
// so a standby that reads it while it is being written sees it incomplete
// and waits for its next look.
const handoffEnd = "end=1"

// prepareHandoff creates the standby token's hand-off file, empty, when the
// standby is spawned: a claim then writes into a file that exists. Creating
// a file is an inode allocation, which on ext4 with files created and removed
// at a burst's pace (every claimed standby removes its own) was ~0.5 ms of
// the daemon's CPU per claim (`recently_deleted` in find_inode_bit); at the
// spawn it is the refill's, after the burst. A failure only means the claim
// creates it.
func (p *pool) prepareHandoff(token string) {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return
	}
	if f, err := os.OpenFile(filepath.Join(p.dir, token), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
		_ = f.Close()
	}
}

// writeHandoff writes h for the standby token into its file (made at the
// spawn, or now), readable by the daemon's user only. It is written in place,
// not renamed into place (see prepareHandoff): the standby takes only a file
// that ends with handoffEnd, so it never acts on half of one.
func (p *pool) writeHandoff(token string, h handoff) error {
	body := fmt.Sprintf("reservation=%s\ngeneration=%d\ncgroup=%s\npane_pid=%d\n%s\n",
		h.resID, h.generation, h.cgroup, h.panePID, handoffEnd)
	path := filepath.Join(p.dir, token)
	open := func() (*os.File, error) {
		return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	}
	f, err := open()
	if errors.Is(err, fs.ErrNotExist) {
		// The directory went (or prepareHandoff could not make it): made
		// here, off the common path, where the file exists since the spawn.
		if err = os.MkdirAll(p.dir, 0o700); err == nil {
			f, err = open()
		}
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// dropHandoff removes a claim's hand-off file (the claim was undone).
func (p *pool) dropHandoff(token string) {
	if p != nil && token != "" {
		_ = os.Remove(filepath.Join(p.dir, token))
	}
}

// readHandoff parses a hand-off file.
func readHandoff(path string) (handoff, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return handoff{}, err
	}
	if !strings.HasSuffix(string(b), "\n"+handoffEnd+"\n") {
		return handoff{}, errors.New("hand-off file incomplete")
	}
	var h handoff
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "reservation":
			h.resID = v
		case "generation":
			h.generation, _ = strconv.ParseUint(v, 10, 64)
		case "cgroup":
			h.cgroup = v
		case "pane_pid":
			h.panePID, _ = strconv.Atoi(v)
		}
	}
	if h.resID == "" || h.generation == 0 || h.panePID <= 0 {
		return h, errors.New("hand-off file incomplete")
	}
	return h, nil
}

// validToken: a standby token is 16 lowercase hex digits (spawn's), so it is
// safe as a file name and a session name.
func validToken(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// PoolStats is what the pool holds now.
type PoolStats struct {
	Size   int // the configured size (0: off)
	Ready  int // standbys spawned and free
	Claims int // creates served by a standby since start
}

// PoolStats reports the warm pool's state.
func (m *Manager) PoolStats() PoolStats {
	p := m.pool
	if p == nil {
		return PoolStats{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Size: p.size, Ready: len(p.free), Claims: p.claims}
}

// isStandby reports whether s is a warm pool's standby not yet claimed: its
// name says so and it carries no identity. ls, show and every lookup by name
// or id skip it, as if it were not there.
func isStandby(s *census.Session) bool {
	return strings.HasPrefix(s.Name, standbyPrefix) && s.Identity() == ""
}
