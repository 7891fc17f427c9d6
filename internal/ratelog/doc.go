// Package ratelog limits how often a repeated warning is logged.
//
// Whatever arrives from another process is hostile until verified, and a
// client that floods the broker with forged messages must not be able to
// turn each rejection into a log line: that fills a disk, or a test's
// buffer, as fast as it can publish. A Limiter lets the first Burst events
// of a key through, then one per Period, and reports with each logged
// event how many were suppressed since the last one; the counts that
// matter (rejections by reason) are kept by the caller regardless.
package ratelog
