package integrity

import "context"

// checkFast is Check's step 2 for a fast capture: each walked directory
// is opened through its parents without following a symbolic link, and
// each tracked path in it examined with fstatat through the directory's
// descriptor, directories in parallel on up to GOMAXPROCS goroutines; a
// path whose stat data is unchanged (see unchanged; for a record taken
// from the index, as the index records it) is not read, any
// other goes through scanner.restat. A directory that cannot be opened
// that way, or was not walked at capture, has its paths examined one by
// one by scanner.restat, which reports them missing or behind a symlink,
// as are the paths recorded outside the directories (.supervisor/). It
// returns the current state of every path it re-read (any path not
// returned is unchanged) and whether every walked directory is unchanged.
func (b *Baseline) checkFast(ctx context.Context, s *scanner) (map[string]fileState, bool, error) {
	t := b.fast
	rootFd, err := openDir(b.root)
	if err != nil {
		rootFd = -1
	} else {
		defer closeDir(rootFd)
	}
	// rereads[i] holds the paths of t.dirs[i] that were re-read, with
	// their states: unchanged paths are left out.
	type reread struct {
		path  string
		state fileState
	}
	rereads := make([][]reread, len(t.dirs))
	same := make([]bool, len(t.dirs))
	if err := parallel(ctx, len(t.dirs), func(i int) {
		d := &t.dirs[i]
		fd := -1
		if d.walked && rootFd >= 0 {
			if f, err := openDirAt(rootFd, d.rel); err == nil {
				fd = f
			}
		}
		if fd < 0 {
			same[i] = !d.walked
			for j, n := range d.names {
				p := d.path(n)
				rereads[i] = append(rereads[i], reread{p, s.restat(ctx, p, d.states[j])})
			}
			return
		}
		defer closeDir(fd)
		same[i] = unchanged(d.self, statFd(fd))
		var nameZ []byte
		for j, n := range d.names {
			nameZ = append(append(nameZ[:0], n...), 0)
			if old := d.states[j]; !unchanged(old, statAt(fd, nameZ, false)) {
				p := d.path(n)
				rereads[i] = append(rereads[i], reread{p, s.restat(ctx, p, old)})
			}
		}
	}); err != nil {
		return nil, false, err
	}
	out := make(map[string]fileState)
	allSame := true
	for i := range t.dirs {
		allSame = allSame && same[i]
		for _, r := range rereads[i] {
			out[r.path] = r.state
		}
	}
	for p, old := range b.files {
		out[p] = s.restat(ctx, p, old)
	}
	return out, allSame, ctx.Err()
}
