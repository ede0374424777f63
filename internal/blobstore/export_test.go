package blobstore

// SignV4 exposes the request signer to the AWS test-vector test.
var SignV4 = signV4
