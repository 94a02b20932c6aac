package fusefence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/strictmodes"
)

// Event is one denial, one JSON line in the audit log.
type Event struct {
	Time time.Time `json:"time"` // RFC 3339 with nanoseconds
	PID  uint32    `json:"pid"`  // the calling process (see [processOf]; 0: the kernel itself)
	UID  uint32    `json:"uid"`
	Op   string    `json:"op"`
	// Path is mount-relative ("." is the mount root), the way the mirror names the
	// target: the caller's path after the kernel resolved it in the mount.
	Path string `json:"path"`
	// HostPath is where the mutation would have landed: the canonical host target
	// when it was resolved, else SOURCE joined with Path.
	HostPath string `json:"hostPath"`
	// Mode is the mode the decision was made under; "" when the policy file was
	// malformed (rule policy-invalid). A string, not a policy.Mode, because "" must
	// read back.
	Mode string `json:"mode"`
	Rule string `json:"rule"`
	// PathBytes and HostPathBytes are Path and HostPath byte for byte (base64 in
	// the JSON), present only when those are not valid UTF-8. A file name is any
	// bytes, a JSON string only UTF-8: encoding/json writes each invalid byte as
	// U+FFFD, so names that differ only there would read the same, and a denial
	// could be made to point at another file. The log writes them; ReadAudit puts
	// the exact bytes back into Path and HostPath.
	PathBytes     []byte `json:"pathBytes,omitempty"`
	HostPathBytes []byte `json:"hostPathBytes,omitempty"`
}

// Record is one line of an audit log as read back: a denial, or a note that Dropped
// denials were not recorded because the writer could not keep up (or, Dropped 1, a
// record a full disk cut short).
type Record struct {
	Event
	Dropped uint64 `json:"dropped,omitempty"`
}

// auditQueue bounds the events waiting for the writer. Beyond it events are counted
// and dropped, never waited for: a FUSE request must not stall on the log.
const auditQueue = 4096

// maxBatch bounds one write(2). Each write holds whole lines only, so a daemon killed
// mid-flush leaves no torn line behind.
const maxBatch = 64 << 10

// AuditMaxBytes bounds an audit log's size. A caller can provoke denials as fast as
// it can make system calls, each with a path of up to PATH_MAX bytes (found by
// review: 600 MB in two seconds of denied ioctls on a deep tree); past the bound,
// denials are still denied but only counted, in a {"dropped":N} note written at most
// once a second and when the log closes, within auditNoteRoom more bytes.
const AuditMaxBytes = 1 << 30

// auditNoteRoom is what the dropped notes may add beyond AuditMaxBytes.
const auditNoteRoom = 1 << 20

// AuditLog appends denial events to a file from a background goroutine. Log never
// blocks: when the queue is full the event is counted, and a {"dropped":N} line is
// written once the writer catches up. Close flushes everything queued. The file
// grows to at most max (AuditMaxBytes) with events, see there.
type AuditLog struct {
	path    string
	file    *os.File
	queue   chan auditMsg
	dropped atomic.Uint64
	done    chan struct{}
	size    int64 // the file's size, as this writer knows it
	torn    bool  // the last write was cut short inside a line
	max     int64

	mu     sync.RWMutex // guards closed against Log racing Close
	closed bool

	errMu sync.Mutex
	err   error // the first write error
}

type auditMsg struct {
	ev   Event
	sync chan struct{} // non-nil: a Sync marker, closed once everything before it is written
}

// OpenAudit opens (creating it 0600) the audit log at path for appending and starts
// its writer.
//
// The log is the record of what the fence refused, so no other user may choose
// where it is written, nor rewrite or replace it (found by review: a link planted
// at its name, in /tmp say, had a root daemon create or append to any file the
// link's owner chose; a log another user owned was theirs to forge; a link of
// theirs as a directory on the way let them swap in a directory of theirs). So
// the path must pass strictmodes.Check (no link or directory on the way another
// user could change), its last component must not be a symlink, the file is
// opened at the path Check resolved following no symlink at all, and it must be a
// regular file of this process's user with one name and no write for group or
// others.
func OpenAudit(path string) (*AuditLog, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("audit log %q: it is a symbolic link; give the file itself", path)
	}
	resolved, err := strictmodes.Check("the audit log", path)
	if err != nil {
		return nil, err
	}
	f, err := openAuditFile(resolved)
	if err != nil {
		return nil, fmt.Errorf("opening audit log %q: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("opening audit log %q: %w", path, err)
	}
	switch euid := uint32(os.Geteuid()); {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("not a regular file (mode %06o)", st.Mode)
	case st.Uid != euid:
		err = fmt.Errorf("owned by uid %d, not by uid %d: its owner could rewrite the records", st.Uid, euid)
	case st.Nlink != 1:
		err = fmt.Errorf("it has %d names: give a file with one", st.Nlink)
	case st.Mode&0o022 != 0:
		err = fmt.Errorf("mode %04o lets others rewrite the records (chmod go-w)", st.Mode&0o7777)
	case st.Size > 0 && !holdsRecords(resolved, &st):
		// Records appended to a file of another kind would damage it (--audit
		// /etc/passwd was accepted: found by review).
		err = errors.New("it is not empty and holds no audit records: give a new file, or an audit log")
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log %q: %w", path, err)
	}
	return startAudit(f, path, AuditMaxBytes)
}

// recordStart matches the start of a record as the writer writes it, up to its op.
var recordStart = regexp.MustCompile(`^\{"time":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9:]+)","pid":[0-9]+,"uid":[0-9]+,"op":"`)

// holdsRecords reports whether the file at p, which must be the file st describes,
// starts like an audit log: its first line is a whole record as ReadAudit reads it
// (strict JSON, no unknown field, a time, an op and a rule; or a dropped-count
// note), or it starts as the writer starts a record (recordStart: a record longer
// than is read here, or one a full disk cut short). A first byte of '{' was enough
// before, so a JSON configuration file given by mistake was accepted and appended
// to.
func holdsRecords(p string, st *unix.Stat_t) bool {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if unix.Fstat(fd, &now) != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return false
	}
	// A record is at most a few times PATH_MAX; read no more than this of a file
	// that is something else.
	const firstLineMax = 256 << 10
	buf := make([]byte, firstLineMax)
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if m <= 0 || err != nil {
			break
		}
		n += m
		if bytes.IndexByte(buf[:n], '\n') >= 0 {
			break
		}
	}
	line, _, found := bytes.Cut(buf[:n], []byte("\n"))
	if recordStart.Match(line) {
		// A record as the writer starts one: whole, longer than read here, or cut
		// short by a full disk (see run).
		return true
	}
	if !found {
		return false
	}
	// As the writer spells them: encoding/json alone would also take other cases
	// of the keys, and a closing bracket after the object (found by review).
	line = bytes.TrimRight(line, " \t\r")
	if !bytes.HasPrefix(line, []byte(`{"time":`)) && !bytes.HasPrefix(line, []byte(`{"dropped":`)) {
		return false
	}
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if dec.Decode(&rec) != nil || dec.InputOffset() != int64(len(line)) {
		return false
	}
	return rec.Dropped > 0 || (rec.Op != "" && rec.Rule != "" && !rec.Time.IsZero())
}

func startAudit(f *os.File, path string, max int64) (*AuditLog, error) {
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening audit log %q: %w", path, err)
	}
	a := &AuditLog{path: path, file: f, queue: make(chan auditMsg, auditQueue), done: make(chan struct{}),
		size: fi.Size(), max: max}
	if a.size > 0 {
		// A log left with a torn line (a write the disk cut short): the next
		// record starts a line of its own. The log is open for writing only: read
		// through a second descriptor of the same file.
		if r, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err == nil {
			var last [1]byte
			if n, _ := r.ReadAt(last[:], a.size-1); n == 1 && last[0] != '\n' {
				a.torn = true
			}
			r.Close()
		}
	}
	go a.run()
	return a, nil
}

// Path is the log's path as given to OpenAudit.
func (a *AuditLog) Path() string { return a.path }

// Log queues ev without ever blocking.
func (a *AuditLog) Log(ev Event) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		a.dropped.Add(1)
		return
	}
	select {
	case a.queue <- auditMsg{ev: ev}:
	default:
		a.dropped.Add(1)
	}
}

// Sync waits until every event logged before it is written (or counted as dropped)
// and returns the first write error so far. It blocks; never call it from a FUSE
// request.
func (a *AuditLog) Sync() error {
	a.mu.RLock()
	if a.closed {
		a.mu.RUnlock()
		return a.firstErr()
	}
	done := make(chan struct{})
	a.queue <- auditMsg{sync: done}
	a.mu.RUnlock()
	<-done
	return a.firstErr()
}

// Close writes everything queued, closes the file and returns the first error.
func (a *AuditLog) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		<-a.done
		return a.firstErr()
	}
	a.closed = true
	close(a.queue)
	a.mu.Unlock()
	<-a.done
	if err := a.file.Close(); err != nil {
		a.setErr(err)
	}
	return a.firstErr()
}

func (a *AuditLog) run() {
	defer close(a.done)
	var batch []byte
	var waiting []chan struct{}
	var lastNote time.Time
	flush := func(final bool) {
		full := a.size+int64(len(batch)) >= a.max
		if full && !final && time.Since(lastNote) < time.Second {
			// At the bound, dropped notes come once a second at most.
		} else if n := a.dropped.Load(); n > 0 && a.size+int64(len(batch)) < a.max+auditNoteRoom {
			// Subtracts n (two's complement), keeping what Log counted meanwhile.
			a.dropped.Add(-n)
			batch = fmt.Appendf(batch, "{\"dropped\":%d}\n", n)
			lastNote = time.Now()
		}
		if len(batch) > 0 {
			if a.torn {
				// The last write was cut short: what follows starts a line of its own.
				batch = append([]byte{'\n'}, batch...)
			}
			n, err := a.file.Write(batch)
			// A write the disk or a quota cut short leaves a torn line. It stays
			// (cutting the file back could remove another writer's records; found by
			// review): ReadAudit reads it as one denial not recorded whole, and
			// OpenAudit takes such a log back.
			if n > 0 {
				a.torn = batch[n-1] != '\n'
			}
			a.size += int64(n)
			if err != nil {
				a.setErr(fmt.Errorf("writing audit log %q: %w", a.path, err))
			}
			batch = batch[:0]
		}
		for _, w := range waiting {
			close(w)
		}
		waiting = waiting[:0]
	}
	add := func(m auditMsg) {
		if m.sync != nil {
			waiting = append(waiting, m.sync)
			return
		}
		ev := m.ev
		// The exact bytes go in base64; the text fields then carry one U+FFFD per
		// run of invalid bytes, not encoding/json's six-byte escape per byte.
		if !utf8.ValidString(ev.Path) {
			ev.PathBytes = []byte(ev.Path)
			ev.Path = strings.ToValidUTF8(ev.Path, "\uFFFD")
		}
		if !utf8.ValidString(ev.HostPath) {
			ev.HostPathBytes = []byte(ev.HostPath)
			ev.HostPath = strings.ToValidUTF8(ev.HostPath, "\uFFFD")
		}
		line, err := json.Marshal(ev)
		if err != nil { // cannot happen for these field types; count it rather than lose it silently
			a.dropped.Add(1)
			return
		}
		if a.size+int64(len(batch)+len(line)+1) > a.max {
			a.dropped.Add(1)
			return
		}
		if len(batch)+len(line)+1 > maxBatch {
			flush(false)
		}
		batch = append(append(batch, line...), '\n')
	}
	for m := range a.queue {
		add(m)
	drain:
		for {
			select {
			case m, ok := <-a.queue:
				if !ok {
					break drain
				}
				add(m)
			default:
				break drain
			}
		}
		flush(false)
	}
	flush(true)
}

func (a *AuditLog) setErr(err error) {
	a.errMu.Lock()
	defer a.errMu.Unlock()
	if a.err == nil {
		a.err = err
	}
}

func (a *AuditLog) firstErr() error {
	a.errMu.Lock()
	defer a.errMu.Unlock()
	return a.err
}

// Filter selects audit records; zero fields match everything.
type Filter struct {
	Op    string
	Rule  string
	Since time.Time // records at or after this instant
}

// Match reports whether r passes f. A {"dropped":N} note passes unless Op or Rule is
// set: what was dropped is unknown.
func (f Filter) Match(r Record) bool {
	if r.Dropped > 0 {
		return f.Op == "" && f.Rule == ""
	}
	return (f.Op == "" || r.Op == f.Op) &&
		(f.Rule == "" || r.Rule == f.Rule) &&
		(f.Since.IsZero() || !r.Time.Before(f.Since))
}

// ReadAudit calls fn for every record of the audit log read from r, in order. A line
// that is not a record is an error naming its line number, except a final line
// without a newline, which is a write cut short and is skipped.
func ReadAudit(r io.Reader, fn func(Record) error) error {
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			terminated := line[len(line)-1] == '\n'
			var rec Record
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.DisallowUnknownFields()
			if derr := dec.Decode(&rec); derr != nil {
				switch {
				case !terminated:
					return nil
				case recordStart.Match(line):
					// A record the disk cut short (see run): a denial not
					// recorded whole.
					rec = Record{Dropped: 1}
				default:
					return fmt.Errorf("audit log line %d: %w", n, derr)
				}
			}
			if rec.PathBytes != nil {
				rec.Path = string(rec.PathBytes)
			}
			if rec.HostPathBytes != nil {
				rec.HostPath = string(rec.HostPathBytes)
			}
			if ferr := fn(rec); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
