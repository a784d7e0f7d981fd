package redisstate

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// The roles that use Redis, each connecting as an ACL user of its own.
const (
	RoleCoordinator = "coordinator"
	RoleWorker      = "worker"
	RoleGateRunner  = "gaterunner"
)

// ACLRoles are the roles ACLRules knows, in the order ACLFile writes them.
var ACLRoles = []string{RoleCoordinator, RoleWorker, RoleGateRunner}

// grant is what one role may do with the store's keys, by the keys'
// state-level names (globs): leases (lock and fencing counter), cache
// entries written and read, cache entries only read.
type grant struct {
	leases     []string
	cache      []string
	cacheRead  []string
	listsBreak bool
}

// baseCommands are what every role's store needs: connecting (PING, HELLO,
// which go-redis sends; it ignores a refused CLIENT SETINFO), the lease scripts (EVALSHA, EVAL
// and the commands they call), cache and breaker reads and writes, and
// the optimistic transactions of breaker changes.
var baseCommands = []string{
	"+ping", "+hello",
	"+evalsha", "+eval", "+get", "+set", "+del", "+exists", "+incr", "+pexpire",
	"+watch", "+unwatch", "+multi", "+exec", "+discard",
}

// grants is the one place the roles' Redis permissions are decided. The
// key names are the state-level keys the code uses: the coordinator's
// leader lease (engine), merge locks (engine.MergeLockKey), job leases
// ("lease/<job>", jobrun and the coordinator's watchdog), file locks
// (protocol.FileLockKey, the worker), the gate cache and its locks
// (gatecache.EntryPrefix, gatecache.LockPrefix, the gate runner), and the
// finished-workflow markers (protocol.WorkflowFinishedKey: the
// coordinator writes them, runners read them). Every role reads and
// reports circuit breakers; only the coordinator lists them (SCAN, MGET).
var grants = map[string]grant{
	RoleCoordinator: {
		leases: []string{"coordinator/leader", "merge/*", "lease/*"},
		cache:  []string{"workflow-finished/*"}, listsBreak: true,
	},
	RoleWorker: {
		leases:    []string{"lease/*", "files/*"},
		cacheRead: []string{"workflow-finished/*"},
	},
	RoleGateRunner: {
		leases:    []string{"lease/*", "gatecache-lock/*"},
		cache:     []string{"gatecache/v1/*"},
		cacheRead: []string{"workflow-finished/*"},
	},
}

// ACLRules returns the Redis ACL rules of role for a store whose keys are
// under prefix (DefaultPrefix unless WithPrefix changed it): the commands
// it may run and the key patterns it may touch, everything else refused.
// The password is not among them.
func ACLRules(role, prefix string) ([]string, error) {
	g, ok := grants[role]
	if !ok {
		return nil, fmt.Errorf("redisstate: no Redis ACL for role %q (want one of %s)", role, strings.Join(ACLRoles, ", "))
	}
	s := &Store{prefix: globEscape(prefix)}
	rules := []string{"resetchannels", "resetkeys", "-@all"}
	rules = append(rules, baseCommands...)
	if g.listsBreak {
		rules = append(rules, "+scan", "+mget")
	}
	for _, k := range g.leases {
		rules = append(rules, "~"+s.lockKey(k), "~"+s.lockSeqKey(k))
	}
	for _, k := range g.cache {
		rules = append(rules, "~"+s.cacheKey(k))
	}
	for _, k := range g.cacheRead {
		rules = append(rules, "%R~"+s.cacheKey(k))
	}
	rules = append(rules, "~"+s.breakerKey("*"), "~"+s.epochKey())
	return rules, nil
}

// ACLUser is one user of an ACL file: a role's rules under a name and a
// password.
type ACLUser struct {
	Name     string
	Role     string
	Password string
}

// ACLFile renders a Redis users.acl file (the aclfile directive) for
// users, with keys under prefix: each user with its role's ACLRules and
// its password stored as a SHA-256 hash, and the default user (no
// password, what a client that does not authenticate gets) allowed PING
// alone, for health checks.
func ACLFile(users []ACLUser, prefix string) (string, error) {
	var b strings.Builder
	b.WriteString("user default on nopass resetchannels resetkeys -@all +ping +hello\n")
	seen := map[string]bool{"default": true}
	sorted := append([]ACLUser(nil), users...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, u := range sorted {
		if u.Name == "" || strings.ContainsAny(u.Name, " \t\r\n") || seen[u.Name] {
			return "", fmt.Errorf("redisstate: ACL user name %q is empty, has blanks or is taken", u.Name)
		}
		seen[u.Name] = true
		if u.Password == "" {
			return "", fmt.Errorf("redisstate: ACL user %s has no password", u.Name)
		}
		rules, err := ACLRules(u.Role, prefix)
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256([]byte(u.Password))
		fmt.Fprintf(&b, "user %s on #%s %s\n", u.Name, hex.EncodeToString(sum[:]), strings.Join(rules, " "))
	}
	return b.String(), nil
}

// NewPassword returns a random password (256 bits, URL-safe base64), safe
// to put in a URL's user information.
func NewPassword() (string, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("redisstate: random password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(buf), nil
}
