package identity

import (
	"context"
	"strings"
	"testing"
)

func TestPasswordHashRoundTrip(t *testing.T) {
	ctx := context.Background()
	h, err := HashPassword(ctx, "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not an argon2id PHC string with the default parameters", h)
	}
	h2, _ := HashPassword(ctx, "correct horse battery")
	if h == h2 {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	ok, rehash, err := VerifyPassword(ctx, "correct horse battery", h)
	if err != nil || !ok || rehash {
		t.Fatalf("verify right password: ok=%v rehash=%v err=%v", ok, rehash, err)
	}
	ok, _, err = VerifyPassword(ctx, "correct horse batterY", h)
	if err != nil || ok {
		t.Fatalf("verify wrong password: ok=%v err=%v", ok, err)
	}
}

func TestPasswordOldParamsNeedRehash(t *testing.T) {
	ctx := context.Background()
	old := Argon2Params{Memory: 8 * 1024, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}
	h, err := hashWith(ctx, "a long password", old)
	if err != nil {
		t.Fatal(err)
	}
	ok, rehash, err := VerifyPassword(ctx, "a long password", h)
	if err != nil || !ok || !rehash {
		t.Fatalf("old-parameter hash: ok=%v rehash=%v err=%v (want ok and rehash)", ok, rehash, err)
	}
	if ok, rehash, _ := VerifyPassword(ctx, "wrong password!", h); ok || rehash {
		t.Fatal("a wrong password must not ask for a rehash")
	}
}

func TestPasswordMalformedHashes(t *testing.T) {
	ctx := context.Background()
	good, _ := HashPassword(ctx, "whatever123")
	parts := strings.Split(good, "$")
	for _, bad := range []string{
		"", "plain", "$2a$10$abcdefghijklmnopqrstuv", // bcrypt
		strings.Replace(good, "argon2id", "argon2i", 1),
		strings.Replace(good, "v=19", "v=16", 1),
		strings.Replace(good, parts[3], "m=4294967295,t=1,p=1", 1), // absurd memory
		strings.Replace(good, parts[3], "m=19456,t=0,p=1", 1),
		strings.Replace(good, parts[4], "!!", 1),
		good + "$extra",
	} {
		if ok, _, err := VerifyPassword(ctx, "whatever123", bad); ok || err == nil {
			t.Errorf("VerifyPassword(%q) = %v, %v; want an error", bad, ok, err)
		}
	}
}

func TestDummyVerify(t *testing.T) {
	if err := DummyVerify(context.Background(), "anything at all"); err != nil {
		t.Fatal(err)
	}
}

func TestHashRespectsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Fill every slot so acquiring must wait, then see the cancelled context win.
	for range cap(hashSlots) {
		hashSlots <- struct{}{}
	}
	defer func() {
		for range cap(hashSlots) {
			<-hashSlots
		}
	}()
	if _, err := HashPassword(ctx, "does not matter"); err == nil {
		t.Fatal("HashPassword with all slots busy and a cancelled context returned no error")
	}
}

func BenchmarkHashPassword(b *testing.B) {
	for b.Loop() {
		if _, err := HashPassword(context.Background(), "benchmark password"); err != nil {
			b.Fatal(err)
		}
	}
}
