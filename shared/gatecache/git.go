package gatecache

import (
	"errors"
	"io"
	"os"
)

// copyFile copies src to dst and gives dst src's modification time, so
// git's racy-entry check (an entry whose mtime is not older than the index
// file is re-read by content) works on the copy exactly as on the original.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chtimes(dst, info.ModTime(), info.ModTime())
}

// isNotExist reports whether err means a path does not exist.
func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
