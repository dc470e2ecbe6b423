// kstatus reads Kubernetes objects as JSON (one per line) on stdin and prints, for each, the
// status that sigs.k8s.io/cli-utils' kstatus computes for it — what Flux, kpt and other
// kstatus readers see: Current, InProgress, Failed, Terminating or Unknown. Used by the
// tests to check imagemap's conditions against the real rules, not a copy of them.
package main

import (
	"bufio"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(in.Bytes()); err != nil {
			fmt.Fprintln(os.Stderr, "kstatus: not a Kubernetes object:", err)
			os.Exit(2)
		}
		res, err := status.Compute(obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kstatus:", err)
			os.Exit(2)
		}
		fmt.Println(res.Status)
	}
}
