// Package snapstream holds the test that measures arena snapshot streams
// through the platform's frame codec (gateway/framecodec): the bytes per second
// a player costs when the client renders. It has no code of its own.
package snapstream
