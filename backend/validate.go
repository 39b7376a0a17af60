package backend

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of user-supplied values.
const (
	MinSlugLen        = 2
	MaxSlugLen        = 32
	MaxTenantNameLen  = 64 // runes
	MinDeviceIDLen    = 16
	MaxDeviceIDLen    = 128
	MaxDisplayNameLen = 32 // runes
	MaxModuleNameLen  = 64
	MaxModuleBytes    = 32 << 20
	// MaxRequestBytes is the largest request message accepted: a module of
	// MaxModuleBytes plus room for the rest of the message. Only
	// AdminService.UploadModule reads that much; the other services have
	// their own limits below.
	MaxRequestBytes = 33 << 20
	// MaxAuthRequestBytes bounds an AuthService request (anonymous callers).
	MaxAuthRequestBytes = 16 << 10
	// MaxAdminRequestBytes bounds an AdminService request other than
	// UploadModule.
	MaxAdminRequestBytes = 256 << 10
	// MaxProgressionRequestBytes bounds a ProgressionService request.
	MaxProgressionRequestBytes = 64 << 10
	// MaxReportRequestBytes bounds a MatchReportService request: MaxPlayers
	// players with three full maps each take about 4 MiB.
	MaxReportRequestBytes = 8 << 20
)

// clip shortens an untrusted value for an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	for i := max; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "…"
		}
	}
	return s[:max] + "…"
}

func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func isLowerDigit(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

func isSlugByte(c byte) bool { return isLowerDigit(c) || c == '-' }

func isModuleNameByte(c byte) bool { return isLowerDigit(c) || c == '-' || c == '_' }

func isDeviceByte(c byte) bool {
	return isLowerDigit(c) || 'A' <= c && c <= 'Z' || c == '-' || c == '_'
}

func checkSlug(field, s string) error {
	if len(s) < MinSlugLen || len(s) > MaxSlugLen || !allBytes(s, isSlugByte) {
		return fmt.Errorf("%s must be %d..%d characters of a-z, 0-9 and \"-\", got %q", field, MinSlugLen, MaxSlugLen, clip(s))
	}
	return nil
}

func checkDeviceID(s string) error {
	if len(s) < MinDeviceIDLen || len(s) > MaxDeviceIDLen || !allBytes(s, isDeviceByte) {
		return fmt.Errorf("device_id must be %d..%d characters of A-Z, a-z, 0-9, \"_\" and \"-\" (got %d characters): generate a random id once, e.g. 16 random bytes in base64url, and keep it on the device",
			MinDeviceIDLen, MaxDeviceIDLen, utf8.RuneCountInString(s))
	}
	return nil
}

func checkModuleName(s string) error {
	if len(s) < 1 || len(s) > MaxModuleNameLen || !allBytes(s, isModuleNameByte) {
		return fmt.Errorf("module name must be 1..%d characters of a-z, 0-9, \"-\" and \"_\", got %q", MaxModuleNameLen, clip(s))
	}
	return nil
}

func checkBuildID(s string) error {
	if len(s) != 64 || !allBytes(s, func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }) {
		return fmt.Errorf("build_id must be 64 lowercase hex characters (a SHA-256), got %q", clip(s))
	}
	return nil
}

// cleanName trims a human-readable name and checks it is printable text of at
// most max runes.
func cleanName(field, s string, max int) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%s must be valid UTF-8", field)
	}
	s = strings.TrimSpace(s)
	if n := utf8.RuneCountInString(s); n > max {
		return "", fmt.Errorf("%s must be at most %d characters, got %d", field, max, n)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return "", fmt.Errorf("%s must be printable text: character %U is not allowed", field, r)
		}
	}
	return s, nil
}

// More limits of user-supplied values.
const (
	MaxEmailLen          = 254
	MinPasswordLen       = 8
	MaxPasswordLen       = 128 // runes
	MaxCustomIDLen       = 128
	MaxKeyNameLen        = 64 // runes
	MaxIdempotencyKeyLen = 128
	MaxReasonLen         = 128 // runes
	MaxNameKeyLen        = 64  // currency and item names
	MaxMapEntries        = 64
	MaxDelta             = 1_000_000_000_000
	MaxMatchIDLen        = 128
	MaxPlayers           = 256
	// MaxPlace bounds PlayerResult.place and team.
	MaxPlace           = 1024
	MaxWebhookURLLen   = 2048
	MaxRefreshTokenLen = 128
)

// checkText checks a printable UTF-8 value of 1..max bytes (no control
// characters, which includes NUL).
func checkText(field, s string, max int) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("%s must be 1..%d bytes, got %d", field, max, len(s))
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s must be valid UTF-8", field)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%s must be printable text: character %U is not allowed", field, r)
		}
	}
	return nil
}

// cleanEmail lowercases and checks an email address.
func cleanEmail(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if err := checkText("email", s, MaxEmailLen); err != nil {
		return "", err
	}
	at := strings.LastIndexByte(s, '@')
	if at < 1 || at == len(s)-1 || strings.ContainsAny(s, " \t") {
		return "", fmt.Errorf("email must look like name@example.com, got %q", clip(s))
	}
	return s, nil
}

func checkPasswordValue(p string) error {
	if !utf8.ValidString(p) {
		return fmt.Errorf("password must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(p); n < MinPasswordLen || n > MaxPasswordLen {
		return fmt.Errorf("password must be %d..%d characters, got %d", MinPasswordLen, MaxPasswordLen, n)
	}
	if strings.ContainsRune(p, 0) {
		return fmt.Errorf("password must not contain NUL")
	}
	return nil
}

func isNameKeyByte(c byte) bool {
	return isLowerDigit(c) || c == '-' || c == '_' || c == '.' || c == ':'
}

// checkAmounts checks a map of currency or item deltas.
func checkAmounts(field string, m map[string]int64, allowNegative bool) error {
	if len(m) > MaxMapEntries {
		return fmt.Errorf("%s has %d entries; at most %d", field, len(m), MaxMapEntries)
	}
	for k, v := range m {
		if k == "" || len(k) > MaxNameKeyLen || !allBytes(k, isNameKeyByte) {
			return fmt.Errorf("%s names must be 1..%d characters of a-z, 0-9, \"-\", \"_\", \".\" and \":\", got %q", field, MaxNameKeyLen, clip(k))
		}
		if v > MaxDelta || v < -MaxDelta || (!allowNegative && v < 0) {
			return fmt.Errorf("%s[%s] = %d is out of range", field, k, v)
		}
	}
	return nil
}

func isMatchIDByte(c byte) bool { return isDeviceByte(c) || c == '.' || c == ':' }

func checkMatchID(s string) error {
	if s == "" || len(s) > MaxMatchIDLen || !allBytes(s, isMatchIDByte) {
		return fmt.Errorf("match_id must be 1..%d characters of A-Z, a-z, 0-9, \"_\", \"-\", \".\" and \":\", got %q", MaxMatchIDLen, clip(s))
	}
	return nil
}

// checkAccountID checks the shape of an account id (not that it exists).
func checkAccountID(field, s string) error {
	if s == "" || len(s) > 64 || !allBytes(s, func(c byte) bool { return isLowerDigit(c) || c == '_' }) {
		return fmt.Errorf("%s must be an account id like a_..., got %q", field, clip(s))
	}
	return nil
}
