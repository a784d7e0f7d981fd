// Package gates is the one gate schema of Supervisor: the Gate model, its
// validation, dependency resolution and the loader of gate sources. The
// workflow parser (coordinator/internal/workflow) uses the same Checker for
// the gates a workflow defines, so a gate means the same thing, and gets the
// same messages, wherever it is written.
//
// # Schema
//
// A gate has a name, an argv command, a description, a timeout, depends_on,
// a severity, env, working_dir, cache settings (cache, cache_inputs,
// force_hash_large_cache_inputs), skip_on_dependency_failure,
// allowed_writes, allow_shell (GC-01…GC-15), the pending-gate and retry
// limits max_retries, poll_interval and max_pending (with *_secs aliases),
// and image, resources and pool for the sandbox. Durations are Go duration
// strings ("2m") or integer seconds. Gate documents each field and its
// default.
//
// # Validation
//
// Every problem is collected, each with file:line:col and a message saying
// what to write instead (*ValidationError). In particular:
//
//   - Names are letters, digits, '-' and '_' (no '.'), at most 64
//     characters.
//   - Commands are argv lists (CM-01, CM-02). A command running a shell,
//     also behind env, nice, timeout, sudo… with any options and option
//     values, needs allow_shell: true (CM-06), and so does inline code
//     (python -c, perl -e, awk calling system(), make -f /dev/stdin; CM-10)
//     and git running a shell (-c alias.x=!…, rebase --exec; CM-11). See
//     ShellCommand.
//   - Denylisted environment variables (PATH, HOME, USER, LD_*,
//     PYTHONPATH, SUPERVISOR_*; any case) are errors at load, in env and
//     through env wrappers alike (CM-07).
//   - Paths are repository-relative; backslashes count as '/'; '..',
//     absolute paths and drive letters are rejected; allowed_writes can
//     never cover .git/ or .supervisor/ (PP-01…PP-04).
//   - Unknown keys, wrong types (a boolean must be true or false) and
//     reserved keys (required, optional, on_fail: the task decides those,
//     GC-16) are errors.
//
// # Sources
//
// Load merges built-in gate files < the user's file < the project's
// .supervisor/gates.yaml or .toml (only when trusted) < workflow gates <
// task gates (front matter of the task's prompt, Checker.FrontMatter); a later
// definition replaces the whole gate of its name, never single fields.
//
// # Dependencies and failure
//
// Resolve and PlanWith close a request over depends_on and order it
// deterministically (DP-01…DP-06), and Plan.Layers groups the order in
// dispatch layers; ResolveOnFail decides what a failure does (OF-01…OF-03).
package gates
