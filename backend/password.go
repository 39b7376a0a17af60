package backend

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/crypto/argon2"
)

// PasswordParams are argon2id parameters.
type PasswordParams struct {
	MemoryKiB uint32
	Time      uint32
	Threads   uint8
}

// DefaultPasswordParams are OWASP's recommended argon2id parameters (Password
// Storage Cheat Sheet): 19 MiB of memory, 2 iterations, 1 degree of
// parallelism. A hash costs about 20-30 ms of one core.
var DefaultPasswordParams = PasswordParams{MemoryKiB: 19 * 1024, Time: 2, Threads: 1}

const (
	saltLen = 16
	keyLen  = 32
)

var b64raw = base64.RawStdEncoding

// errPasswordsBusy: every password worker was busy for the whole wait.
var errPasswordsBusy = errors.New("too many sign-ins are checking passwords on this server at once: try again in a few seconds")

// passwordTurn waits for one of the Server's password workers (Config.
// PasswordWorkers); release gives it back. Unavailable once the wait has
// passed.
func (s *Server) passwordTurn(ctx context.Context) (release func(), err error) {
	release = func() { <-s.pwTurns }
	select {
	case s.pwTurns <- struct{}{}:
		return release, nil
	default:
	}
	t := time.NewTimer(s.pwWait)
	defer t.Stop()
	select {
	case s.pwTurns <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, connect.NewError(connect.CodeUnavailable, errPasswordsBusy)
	}
}

// hashPasswordInTurn is hashPassword in one of the Server's password turns.
func (s *Server) hashPasswordInTurn(ctx context.Context, password string) (string, error) {
	release, err := s.passwordTurn(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	return hashPassword(s.pwParams, password), nil
}

// hashPassword returns the PHC string of password:
// $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>.
func hashPassword(p PasswordParams, password string) string {
	salt := make([]byte, saltLen)
	rand.Read(salt)
	key := argon2.IDKey([]byte(password), salt, p.Time, p.MemoryKiB, p.Threads, keyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.MemoryKiB, p.Time, p.Threads,
		b64raw.EncodeToString(salt), b64raw.EncodeToString(key))
}

// checkPassword reports whether password matches a PHC string made by
// hashPassword (with whatever parameters it records).
func checkPassword(phc, password string) (bool, error) {
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errors.New("not an argon2id hash")
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return false, errors.New("unsupported argon2 version")
	}
	var p PasswordParams
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.MemoryKiB, &p.Time, &p.Threads); err != nil {
		return false, fmt.Errorf("bad argon2 parameters: %w", err)
	}
	if p.MemoryKiB > 1<<20 || p.Time > 16 || p.Threads == 0 || p.Time == 0 {
		return false, errors.New("argon2 parameters out of range")
	}
	salt, err := b64raw.DecodeString(parts[4])
	if err != nil {
		return false, err
	}
	want, err := b64raw.DecodeString(parts[5])
	if err != nil || len(want) == 0 || len(want) > 128 {
		return false, errors.New("bad argon2 hash")
	}
	got := argon2.IDKey([]byte(password), salt, p.Time, p.MemoryKiB, p.Threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
