package blobstore_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/blobstore/s3fake"
)

// The example "GET Object" request of the AWS SigV4 documentation
// (sig-v4-header-based-auth) signs to the documented signature.
func TestSignV4AWSVector(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://examplebucket.s3.amazonaws.com/test.txt", nil)
	req.Header.Set("Range", "bytes=0-9")
	blobstore.SignV4(req, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1",
		time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC))
	want := "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request," +
		"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date," +
		"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
	if got := req.Header.Get("Authorization"); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestFilesystem(t *testing.T) {
	dir := t.TempDir()
	fs, err := blobstore.Filesystem(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref, err := fs.Put(ctx, "runs/r1/enrichment.json", []byte(`{"v":1}`), "application/json")
	if err != nil || ref != "file:runs/r1/enrichment.json" {
		t.Fatalf("put: %q %v", ref, err)
	}
	if _, err := fs.Put(ctx, "runs/r1/enrichment.json", []byte(`{"v":2}`), "application/json"); err != nil {
		t.Fatal(err)
	}
	got, err := fs.Get(ctx, ref)
	if err != nil || string(got) != `{"v":2}` {
		t.Fatalf("get: %s %v", got, err)
	}
	onDisk, _ := os.ReadFile(filepath.Join(dir, "blobs", "runs", "r1", "enrichment.json"))
	if string(onDisk) != `{"v":2}` {
		t.Fatalf("disk: %s", onDisk)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "blobs", "runs", "r1"))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	if _, err := fs.Get(ctx, "file:runs/r2/none.json"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := fs.Get(ctx, "s3://b/runs/r1/enrichment.json"); !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Fatalf("foreign ref: %v", err)
	}
}

// Keys that could escape the store are refused by both stores, and nothing
// is written.
func TestInvalidKeys(t *testing.T) {
	dir := t.TempDir()
	fs, err := blobstore.Filesystem(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	fake := s3fake.New(t, "bkt", "AK", "SK")
	s3, err := blobstore.S3(blobstore.S3Config{Bucket: "bkt", EndpointURL: fake.URL(), AccessKey: "AK", SecretKey: "SK", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	bad := []string{"", "../escape", "runs/../../escape", "/etc/passwd", "a//b", "a/./b", "./a", "a/", `a\b`, "a b", "a\x00b", "ü", strings.Repeat("a", 1025)}
	for _, key := range bad {
		for name, st := range map[string]blobstore.Store{"fs": fs, "s3": s3} {
			if _, err := st.Put(context.Background(), key, []byte("x"), ""); !errors.Is(err, blobstore.ErrInvalidKey) {
				t.Errorf("%s: key %q accepted (%v)", name, key, err)
			}
		}
		if _, err := fs.Get(context.Background(), "file:"+key); !errors.Is(err, blobstore.ErrInvalidKey) {
			t.Errorf("fs get: key %q accepted (%v)", key, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); err == nil {
		t.Fatal("a file escaped the store")
	}
	if fake.Puts() != 0 {
		t.Fatalf("%d objects put", fake.Puts())
	}
}

func TestS3(t *testing.T) {
	fake := s3fake.New(t, "artifacts", "AKTEST", "secret-key-1")
	ctx := context.Background()
	s3, err := blobstore.S3(blobstore.S3Config{Bucket: "artifacts", Region: "eu-west-1", EndpointURL: fake.URL(),
		AccessKey: "AKTEST", SecretKey: "secret-key-1", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"runs/r1/completion.json", "odd/a=b+c@d.json"} {
		ref, err := s3.Put(ctx, key, []byte(`{"ok":true}`), "application/json")
		if err != nil || ref != "s3://artifacts/"+key {
			t.Fatalf("put %s: %q %v", key, ref, err)
		}
		obj, ok := fake.Object("artifacts", key)
		if !ok || string(obj.Data) != `{"ok":true}` || obj.ContentType != "application/json" {
			t.Fatalf("stored %s: %+v %v", key, obj, ok)
		}
		got, err := s3.Get(ctx, ref)
		if err != nil || string(got) != `{"ok":true}` {
			t.Fatalf("get %s: %s %v", key, got, err)
		}
	}
	if _, err := s3.Get(ctx, "s3://artifacts/runs/none.json"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := s3.Get(ctx, "s3://other/runs/r1/completion.json"); !errors.Is(err, blobstore.ErrInvalidKey) {
		t.Fatalf("other bucket: %v", err)
	}

	fake.FailNext(1)
	var se *blobstore.S3Error
	if _, err := s3.Put(ctx, "runs/r2/completion.json", []byte("{}"), "application/json"); !errors.As(err, &se) || se.Status != 500 || se.Code != "InternalError" {
		t.Fatalf("500: %v", err)
	}

	wrong, _ := blobstore.S3(blobstore.S3Config{Bucket: "artifacts", EndpointURL: fake.URL(), AccessKey: "AKTEST", SecretKey: "wrong", PathStyle: true})
	if _, err := wrong.Put(ctx, "runs/r3/x.json", []byte("{}"), ""); !errors.As(err, &se) || se.Code != "SignatureDoesNotMatch" {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, ok := fake.Object("artifacts", "runs/r3/x.json"); ok {
		t.Fatal("unsigned put stored")
	}
}

func TestOpenChoosesTheStore(t *testing.T) {
	dir := t.TempDir()
	st, err := blobstore.Open(blobstore.Settings{BlobDir: dir})
	if fs, ok := st.(*blobstore.FS); err != nil || !ok || fs.Dir() != dir {
		t.Fatalf("fs: %T %v", st, err)
	}
	st, err = blobstore.Open(blobstore.Settings{BlobDir: dir, S3Bucket: "b", S3EndpointURL: "http://127.0.0.1:9000", S3AccessKey: "a", S3SecretKey: "s"})
	if _, ok := st.(*blobstore.S3Store); err != nil || !ok {
		t.Fatalf("s3: %T %v", st, err)
	}
	if _, err := blobstore.Open(blobstore.Settings{S3Bucket: "b"}); err == nil {
		t.Fatal("S3 without credentials accepted")
	}
}
