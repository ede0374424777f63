// Package blobstore stores small immutable artifacts (run enrichment and
// completion JSON) behind one interface, with two implementations:
//
//   - Filesystem(dir): files under a directory (the default, under the data
//     dir), written atomically (temporary file in the same directory, fsync,
//     rename), so a reader never sees half an artifact;
//   - S3(cfg): any S3-compatible object store (AWS S3, MinIO, R2, …) over
//     plain HTTP with AWS Signature Version 4 (no SDK); path-style addressing
//     for custom endpoints, virtual-hosted style for AWS.
//
// Put returns a ref that names the stored object ("file:<key>" or
// "s3://<bucket>/<key>"); Get takes a ref. Keys are relative slash-separated
// paths of safe characters; "..", "." and empty segments, absolute paths and
// backslashes are refused, so a key can never escape the store.
package blobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Store puts and gets blobs.
type Store interface {
	// Put stores data under key (replacing what was there) and returns the
	// ref that Get accepts.
	Put(ctx context.Context, key string, data []byte, contentType string) (ref string, err error)
	// Get returns the blob a ref names; ErrNotFound when there is none.
	Get(ctx context.Context, ref string) ([]byte, error)
}

// ErrNotFound is returned by Get for a ref with no blob.
var ErrNotFound = errors.New("blobstore: not found")

// ErrInvalidKey is returned for keys (and refs) that are not safe relative
// paths.
var ErrInvalidKey = errors.New("blobstore: invalid key")

// ValidateKey checks that key is a relative path of safe segments: letters,
// digits and - _ . = + @, separated by single slashes, at most 1024 bytes,
// with no "." or ".." segment.
func ValidateKey(key string) error {
	if key == "" || len(key) > 1024 {
		return fmt.Errorf("%w: length must be 1..1024", ErrInvalidKey)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q has an empty, . or .. segment (or is absolute)", ErrInvalidKey, key)
		}
		for _, r := range seg {
			ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.=+@", r)
			if !ok {
				return fmt.Errorf("%w: %q contains %q", ErrInvalidKey, key, r)
			}
		}
	}
	return nil
}

// DefaultBlobDir is the filesystem store's directory when none is set:
// outside any working tree, as config's BLOB_DIR default.
const DefaultBlobDir = "/var/tmp/proliferate/data/blobs"

// Settings choose and configure the store (the S3_* and BLOB_DIR settings).
type Settings struct {
	// S3Bucket, when set, selects S3.
	S3Bucket, S3Region, S3EndpointURL string
	S3AccessKey, S3SecretKey          string
	// BlobDir is the filesystem store's directory (default
	// DefaultBlobDir).
	BlobDir string
}

// Open returns the S3 store when a bucket is configured, else the
// filesystem store under BlobDir.
func Open(s Settings) (Store, error) {
	if s.S3Bucket != "" {
		return S3(S3Config{Bucket: s.S3Bucket, Region: s.S3Region, EndpointURL: s.S3EndpointURL,
			AccessKey: s.S3AccessKey, SecretKey: s.S3SecretKey, PathStyle: s.S3EndpointURL != ""})
	}
	dir := s.BlobDir
	if dir == "" {
		dir = DefaultBlobDir
	}
	return Filesystem(dir)
}
