package abi

// MaxMetaBytes bounds the JSON ludus_meta returns. Metadata within every
// other bound is a few KiB; the host refuses a longer one before decoding it
// (a module's 30 MB list of empty controls took 10 s and a GiB of heap to
// decode before Validate refused it).
const MaxMetaBytes = 64 << 10
