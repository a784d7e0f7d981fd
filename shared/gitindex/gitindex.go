// Package gitindex reads git's index file (.git/index) and compares its
// entries' stat data with the file system the way git itself decides that
// a file is unchanged without reading it.
//
// It is a reader of its own rather than go-git's plumbing/format/index
// decoder: that decoder handles SHA-1 repositories only unless built with a
// tag, does not tell a split index or a sparse index apart from a plain
// one (they must send callers to their slow path, not be read wrongly),
// and would add go-git's dependency tree to the shared module for about
// three hundred lines. FuzzParse checks that no input makes it panic or
// return entries from a malformed file.
//
// Supported: index versions 2, 3 and 4 (path prefix compression), SHA-1
// and SHA-256 object ids, the assume-valid, skip-worktree and
// intent-to-add flags, unmerged stages, and every extension: optional ones
// (an upper-case first letter) are skipped, the required ones "link"
// (split index) and "sdir" (sparse index) and any unknown required one
// make Parse return ErrUnsupported, as do sparse directory entries.
package gitindex

import (
	"bytes"
	"crypto/sha1" //nolint:gosec // git's object and checksum format, not a security choice
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
)

// ErrUnsupported is in the chain of Parse's error when the index is valid
// but uses a feature this package does not read (split index, sparse
// index, an unknown required extension); callers then take a slower path
// through git itself.
var ErrUnsupported = errors.New("gitindex: unsupported index feature")

// Format names an object format: SHA1 or SHA256.
type Format int

// Object formats.
const (
	SHA1 Format = iota
	SHA256
)

// Size is the length in bytes of an object id of the format.
func (f Format) Size() int {
	if f == SHA256 {
		return sha256.Size
	}
	return sha1.Size
}

// New returns a hash of the format.
func (f Format) New() hash.Hash {
	if f == SHA256 {
		return sha256.New()
	}
	return sha1.New() //nolint:gosec // git's object format
}

// ParseFormat maps `git rev-parse --show-object-format` output to a Format.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "sha1", "":
		return SHA1, nil
	case "sha256":
		return SHA256, nil
	}
	return SHA1, fmt.Errorf("gitindex: unknown object format %q", s)
}

// Entry flags (of Entry.Flags).
const (
	// FlagAssumeValid: `git update-index --assume-unchanged`.
	FlagAssumeValid uint16 = 0x8000
	// FlagSkipWorktree: sparse checkout / `--skip-worktree`.
	FlagSkipWorktree uint16 = 0x4000
	// FlagIntentToAdd: `git add -N`.
	FlagIntentToAdd uint16 = 0x2000
)

// Stat is the file system data git records for an entry, each field
// truncated to 32 bits as git stores it.
type Stat struct {
	CtimeSec, CtimeNsec uint32
	MtimeSec, MtimeNsec uint32
	Dev, Ino            uint32
	Mode                uint32 // git's mode: 0o100644, 0o100755, 0o120000, 0o160000
	UID, GID            uint32
	Size                uint32
}

// Entry is one index entry.
type Entry struct {
	Path  string
	Stat  Stat
	ID    []byte // object id (Format.Size() bytes)
	Stage int    // 0, or 1-3 for an unmerged path
	// Flags holds FlagAssumeValid, FlagSkipWorktree and FlagIntentToAdd.
	Flags uint16
}

// Index is a parsed index file.
type Index struct {
	Version int
	Entries []Entry
	// Extensions lists the signatures of the extensions present, in order.
	Extensions []string
}

// Plain reports whether every entry is an ordinary stage-0 entry without
// assume-valid, skip-worktree or intent-to-add.
func (ix *Index) Plain() bool {
	for i := range ix.Entries {
		if ix.Entries[i].Stage != 0 || ix.Entries[i].Flags != 0 {
			return false
		}
	}
	return true
}

const (
	headerSize  = 12
	statSize    = 40 // ten 32-bit fields
	maxEntries  = 1 << 26
	nameMask    = 0x0fff
	flagExtend  = 0x4000
	stageMask   = 0x3000
	stageShift  = 12
	modeTypeDir = 0o040000
)

// Parse decodes an index file's content. The trailing checksum is verified
// unless it is all zeros (index.skipHash).
func Parse(data []byte, f Format) (*Index, error) {
	hs := f.Size()
	if len(data) < headerSize+hs {
		return nil, errors.New("gitindex: file too short")
	}
	if string(data[:4]) != "DIRC" {
		return nil, errors.New("gitindex: not an index file (bad signature)")
	}
	body, sum := data[:len(data)-hs], data[len(data)-hs:]
	if !allZero(sum) {
		h := f.New()
		h.Write(body)
		if !bytes.Equal(h.Sum(nil), sum) {
			return nil, errors.New("gitindex: checksum mismatch")
		}
	}
	ix := &Index{Version: int(binary.BigEndian.Uint32(data[4:8]))}
	if ix.Version < 2 || ix.Version > 4 {
		return nil, fmt.Errorf("%w: version %d", ErrUnsupported, ix.Version)
	}
	n := binary.BigEndian.Uint32(data[8:12])
	if n > maxEntries || int(n) > len(body)/(statSize+hs+3) {
		return nil, fmt.Errorf("gitindex: implausible entry count %d", n)
	}
	ix.Entries = make([]Entry, 0, n)
	// Every path goes into one buffer, made a string once at the end: one
	// allocation for the paths instead of one per entry.
	var paths []byte
	ends := make([]int, 0, n)
	off := headerSize
	var prev []byte
	for i := 0; i < int(n); i++ {
		e, next, name, err := parseEntry(body, off, ix.Version, hs, prev)
		if err != nil {
			return nil, fmt.Errorf("gitindex: entry %d: %w", i, err)
		}
		if e.Stat.Mode&0o170000 == modeTypeDir {
			return nil, fmt.Errorf("%w: sparse directory entry %q", ErrUnsupported, name)
		}
		if len(ix.Entries) > 0 {
			last := &ix.Entries[len(ix.Entries)-1]
			if c := bytes.Compare(prev, name); c > 0 || (c == 0 && last.Stage >= e.Stage) {
				return nil, fmt.Errorf("gitindex: entry %d: %q out of order", i, name)
			}
		}
		ix.Entries = append(ix.Entries, e)
		paths = append(paths, name...)
		ends = append(ends, len(paths))
		prev, off = name, next
	}
	all, start := string(paths), 0
	for i, end := range ends {
		ix.Entries[i].Path = all[start:end]
		start = end
	}
	for off < len(body) {
		if len(body)-off < 8 {
			return nil, errors.New("gitindex: truncated extension header")
		}
		sig := string(body[off : off+4])
		size := binary.BigEndian.Uint32(body[off+4 : off+8])
		if uint64(size) > uint64(len(body)-off-8) {
			return nil, fmt.Errorf("gitindex: extension %q overruns the file", sig)
		}
		ix.Extensions = append(ix.Extensions, sig)
		if sig[0] < 'A' || sig[0] > 'Z' {
			return nil, fmt.Errorf("%w: required extension %q", ErrUnsupported, sig)
		}
		off += 8 + int(size)
	}
	return ix, nil
}

// parseEntry decodes the entry at off; it returns the entry (without its
// Path, which Parse sets), the offset of the next one and the raw path
// (for v4's prefix compression).
func parseEntry(b []byte, off, version, hs int, prev []byte) (Entry, int, []byte, error) {
	var e Entry
	start := off
	if len(b)-off < statSize+hs+2 {
		return e, 0, nil, errors.New("truncated")
	}
	u := func(i int) uint32 { return binary.BigEndian.Uint32(b[off+4*i:]) }
	e.Stat = Stat{CtimeSec: u(0), CtimeNsec: u(1), MtimeSec: u(2), MtimeNsec: u(3), Dev: u(4), Ino: u(5),
		Mode: u(6), UID: u(7), GID: u(8), Size: u(9)}
	off += statSize
	e.ID = b[off : off+hs : off+hs]
	off += hs
	flags := binary.BigEndian.Uint16(b[off:])
	off += 2
	if flags&0x8000 != 0 {
		e.Flags |= FlagAssumeValid
	}
	e.Stage = int(flags&stageMask) >> stageShift
	if flags&flagExtend != 0 {
		if version < 3 {
			return e, 0, nil, errors.New("extended flags in a version 2 index")
		}
		if len(b)-off < 2 {
			return e, 0, nil, errors.New("truncated")
		}
		ext := binary.BigEndian.Uint16(b[off:])
		off += 2
		e.Flags |= ext & (FlagSkipWorktree | FlagIntentToAdd)
	}
	var name []byte
	if version == 4 {
		strip, n := varint(b[off:])
		if n == 0 || strip > uint64(len(prev)) {
			return e, 0, nil, errors.New("bad path prefix")
		}
		off += n
		end := bytes.IndexByte(b[off:], 0)
		if end < 0 {
			return e, 0, nil, errors.New("path not NUL-terminated")
		}
		name = make([]byte, 0, len(prev)-int(strip)+end)
		name = append(append(name, prev[:len(prev)-int(strip)]...), b[off:off+end]...)
		off += end + 1
	} else {
		end := bytes.IndexByte(b[off:], 0)
		if end < 0 {
			return e, 0, nil, errors.New("path not NUL-terminated")
		}
		if l := int(flags & nameMask); l != nameMask && l != end {
			return e, 0, nil, errors.New("path length does not match its flags")
		}
		name = b[off : off+end]
		// The entry is padded with 1 to 8 NULs to a multiple of 8 bytes.
		size := (off - start + end + 8) &^ 7
		if start+size > len(b) {
			return e, 0, nil, errors.New("truncated padding")
		}
		for _, c := range b[off+end : start+size] {
			if c != 0 {
				return e, 0, nil, errors.New("bad padding")
			}
		}
		off = start + size
	}
	if len(name) == 0 {
		// Only a split index's replacement entries have no path.
		return e, 0, nil, fmt.Errorf("%w: entry without a path (split index)", ErrUnsupported)
	}
	return e, off, name, nil
}

// varint decodes git's offset varint (varint.c); n is 0 on malformed input.
func varint(b []byte) (v uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	c := b[0]
	n = 1
	v = uint64(c & 0x7f)
	for c&0x80 != 0 {
		v++
		if v == 0 || v>>(64-7) != 0 || n >= len(b) {
			return 0, 0
		}
		c = b[n]
		n++
		v = v<<7 + uint64(c&0x7f)
	}
	return v, n
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// BlobID returns the object id git gives content stored as a blob (without
// any conversion: the caller decides whether filters could apply).
func BlobID(f Format, content []byte) []byte {
	h := f.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return h.Sum(nil)
}
