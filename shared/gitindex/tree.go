package gitindex

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// TreeEntry is a file of a tree to name: its slash-separated path, git
// mode and object id.
type TreeEntry struct {
	Path string
	Mode uint32
	ID   []byte
}

// TreeID returns the id of the tree git's write-tree would write for the
// entries (paths unique; any order), computing every subtree's object
// without writing any. A path that is both a file and a directory's prefix
// is an error, as it is for git.
func TreeID(f Format, entries []TreeEntry) ([]byte, error) {
	sorted := entries // index order is path order: usually no sort, no copy
	if !slices.IsSortedFunc(entries, byPath) {
		sorted = slices.Clone(entries)
		slices.SortFunc(sorted, byPath)
	}
	arena := make([]treeItem, 0, 256)
	id, rest, err := buildTree(f, sorted, "", &arena)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("gitindex: tree: path %q left over", rest[0].Path)
	}
	return id, nil
}

type treeItem struct {
	name string
	mode uint32
	id   []byte
	dir  bool
}

// buildTree consumes the entries below prefix (sorted) and returns the
// tree's id and the entries after them. The tree's items are appended to
// arena and removed again before it returns, so that the items of a
// subtree, built in the middle, are gone when the tree's next one is
// appended: one slice serves every tree.
func buildTree(f Format, es []TreeEntry, prefix string, arena *[]treeItem) ([]byte, []TreeEntry, error) {
	base := len(*arena)
	defer func() { *arena = (*arena)[:base] }()
	for len(es) > 0 && strings.HasPrefix(es[0].Path, prefix) {
		rel := es[0].Path[len(prefix):]
		if rel == "" || strings.HasPrefix(rel, "/") || strings.HasSuffix(rel, "/") || strings.Contains(rel, "//") {
			return nil, nil, fmt.Errorf("gitindex: tree: bad path %q", es[0].Path)
		}
		name, _, isDir := strings.Cut(rel, "/")
		// In path order, the items before this one whose names start with
		// name come right before it: a file of the same name (a duplicate,
		// or a file where this is a directory) is among them.
		for k := len(*arena) - 1; k >= base && strings.HasPrefix((*arena)[k].name, name); k-- {
			if (*arena)[k].name == name {
				return nil, nil, fmt.Errorf("gitindex: tree: %q is both a file and a directory, or twice a file", prefix+name)
			}
		}
		if !isDir {
			*arena = append(*arena, treeItem{name: name, mode: es[0].Mode, id: es[0].ID})
			es = es[1:]
			continue
		}
		id, rest, err := buildTree(f, es, prefix+name+"/", arena)
		if err != nil {
			return nil, nil, err
		}
		*arena = append(*arena, treeItem{name: name, mode: 0o40000, id: id, dir: true})
		es = rest
	}
	items := (*arena)[base:]
	// git orders a tree's entries by name, a directory's name compared as
	// if it ended in "/".
	if !slices.IsSortedFunc(items, compareItems) {
		slices.SortStableFunc(items, compareItems)
	}
	size := 0
	for _, it := range items {
		if len(it.id) != f.Size() {
			return nil, nil, errors.New("gitindex: tree: object id of the wrong size")
		}
		digits := 1 // of the mode in octal
		for m := it.mode >> 3; m > 0; m >>= 3 {
			digits++
		}
		size += digits + 1 + len(it.name) + 1 + len(it.id)
	}
	h := f.New()
	fmt.Fprintf(h, "tree %d\x00", size)
	var buf [512]byte // an item's bytes, unless its name is longer
	for _, it := range items {
		b := strconv.AppendUint(buf[:0], uint64(it.mode), 8)
		b = append(b, ' ')
		b = append(b, it.name...)
		b = append(b, 0)
		b = append(b, it.id...)
		h.Write(b)
	}
	return h.Sum(nil), es, nil
}

func byPath(a, b TreeEntry) int { return strings.Compare(a.Path, b.Path) }

// compareItems orders tree items as git does: by name, a directory's name
// compared as if it ended in "/" (names hold no "/", so the first byte
// after the shorter name decides).
func compareItems(a, b treeItem) int {
	n := min(len(a.name), len(b.name))
	if c := strings.Compare(a.name[:n], b.name[:n]); c != 0 {
		return c
	}
	return cmp.Compare(after(a, n), after(b, n))
}

// after is the byte of it's name at n as git compares it: -1 past the
// end of a file's name, '/' just past a directory's.
func after(it treeItem, n int) int {
	switch {
	case n < len(it.name):
		return int(it.name[n])
	case it.dir:
		return '/'
	}
	return -1
}
