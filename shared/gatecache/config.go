package gatecache

import (
	"bytes"
	"os"
	"strings"
)

// configUnusual reads the repository's own configuration files (git runs
// with system and user configuration off, see gitexec) and returns why
// fastTree must not apply, or "": a setting that converts content on its
// way into the index (core.autocrlf other than false, core.eol), that
// changes how files are added (core.fileMode or core.symlinks false,
// core.ignoreCase or core.precomposeUnicode true, core.protectHFS set), an
// include, or anything this reader does not parse for sure (a continued
// line, a quoted value of one of those keys, an unreadable file). A
// missing file is fine.
//
// It is a reader of its own because it only has to recognise the plain
// files git writes and say "unusual" otherwise; that sends the key to the
// git path, which is always right.
func configUnusual(files []string) string {
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return "configuration " + f + ": " + err.Error()
		}
		if reason := unusualConfig(data); reason != "" {
			return "configuration " + f + ": " + reason
		}
	}
	return ""
}

// unusualConfig is configUnusual for one file's content.
func unusualConfig(data []byte) string {
	section := ""
	for raw := range bytes.SplitSeq(data, []byte{'\n'}) {
		line := strings.TrimSpace(string(raw))
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			return "a continued line"
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				return "a malformed section header"
			}
			if rest := strings.TrimSpace(line[end+1:]); rest != "" && rest[0] != '#' && rest[0] != ';' {
				return "a value on a section header's line"
			}
			name, sub, _ := strings.Cut(line[1:end], " ")
			section = strings.ToLower(strings.TrimSpace(name))
			if strings.HasPrefix(section, "include") {
				return "an include"
			}
			if strings.TrimSpace(sub) != "" || strings.Contains(section, ".") {
				section += ".sub" // a subsection: never core itself
			}
			continue
		}
		key, value, hasValue := strings.Cut(line, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if key == "" || strings.ContainsAny(key, " \t\"") {
			return "a malformed line"
		}
		if section != "core" {
			continue
		}
		switch key {
		case "autocrlf", "eol", "filemode", "symlinks", "ignorecase", "precomposeunicode", "protecthfs":
		default:
			continue
		}
		if strings.ContainsAny(value, `"\`) {
			return "a quoted core." + key
		}
		if i := strings.IndexAny(value, "#;"); i >= 0 {
			value = value[:i]
		}
		value = strings.ToLower(strings.TrimSpace(value))
		truth := !hasValue || value == "true" || value == "yes" || value == "on" || value == "1"
		falsity := hasValue && (value == "" || value == "false" || value == "no" || value == "off" || value == "0")
		switch key {
		case "autocrlf", "ignorecase", "precomposeunicode":
			if !falsity {
				return "core." + key + " is not false"
			}
		case "filemode", "symlinks":
			if !truth {
				return "core." + key + " is not true"
			}
		default: // eol, protecthfs
			return "core." + key + " is set"
		}
	}
	return ""
}
