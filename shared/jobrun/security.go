package jobrun

import (
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/supervisorhq/supervisor/shared/state/redisstate"
	"github.com/supervisorhq/supervisor/shared/tlsconfig"
)

// AddNATSTLSFlags adds the TLS settings of the connection to NATS:
// --nats-ca, --nats-cert and --nats-key (SUPERVISOR_NATS_CA, ...). Any of
// them given, or a tls:// URL, means TLS is required.
func AddNATSTLSFlags(fs *pflag.FlagSet) {
	fs.String("nats-ca", "", "PEM file of the CA that signed the NATS servers' certificates; given, TLS is required (default with a tls:// URL: the system's roots)")
	fs.String("nats-cert", "", "PEM file of this client's certificate, presented to NATS (with --nats-key)")
	fs.String("nats-key", "", "PEM file of the private key of --nats-cert")
}

// NATSTLS reads the settings AddNATSTLSFlags adds.
func NATSTLS(v *viper.Viper) tlsconfig.Files {
	return tlsconfig.Files{CA: v.GetString("nats-ca"), Cert: v.GetString("nats-cert"), Key: v.GetString("nats-key")}
}

// AddRedisSecurityFlags adds the TLS and password settings of the
// connection to Redis: --redis-ca, --redis-cert, --redis-key and
// --redis-password-file. Any TLS file given, or a rediss:// URL, means TLS
// is required.
func AddRedisSecurityFlags(fs *pflag.FlagSet) {
	fs.String("redis-ca", "", "PEM file of the CA that signed Redis's certificate; given, TLS is required (default with a rediss:// URL: the system's roots)")
	fs.String("redis-cert", "", "PEM file of this client's certificate, presented to Redis (with --redis-key)")
	fs.String("redis-key", "", "PEM file of the private key of --redis-cert")
	fs.String("redis-password-file", "", "file whose first line is the password of the --redis-url user (instead of a password in the URL)")
}

// RedisOptions reads the settings AddRedisSecurityFlags adds as the
// options of redisstate.Open (and backends.Open).
func RedisOptions(v *viper.Viper) []redisstate.Option {
	var opts []redisstate.Option
	if files := (tlsconfig.Files{CA: v.GetString("redis-ca"), Cert: v.GetString("redis-cert"), Key: v.GetString("redis-key")}); !files.IsZero() {
		opts = append(opts, redisstate.WithTLS(files))
	}
	if pw := v.GetString("redis-password-file"); pw != "" {
		opts = append(opts, redisstate.WithPasswordFile(pw))
	}
	return opts
}
