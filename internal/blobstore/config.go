package blobstore

import "github.com/proliferate/proliferate/internal/config"

// OpenConfig opens the store the configuration names (S3_* settings when
// S3_BUCKET is set, else BLOB_DIR): the one way every role opens it.
func OpenConfig(c *config.Config) (Store, error) {
	return Open(Settings{S3Bucket: c.S3Bucket, S3Region: c.S3Region, S3EndpointURL: c.S3EndpointURL,
		S3AccessKey: c.S3AccessKey, S3SecretKey: c.S3SecretKey, BlobDir: c.BlobDir})
}
