// Command podcheck judges Deployments offline with the API server's own code, as it
// judges one being created: decoded as it decodes JSON (case-sensitive, an unknown or
// duplicate field refused, as kubectl's default strict field validation asks),
// defaulted, converted and validated by the Deployment strategy's validation (the pod
// template's volumes, affinity, containers...). It prints one JSON list: each
// Deployment's errors.
//
// Usage: podcheck DEPLOYMENT.yaml...
package main

import (
	"encoding/json"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

func judge(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var versioned appsv1.Deployment
	strictErrs, err := kjson.UnmarshalStrict(asJSON, &versioned)
	if err != nil {
		return []string{err.Error()}, nil
	}
	if len(strictErrs) > 0 {
		errs := []string{}
		for _, e := range strictErrs {
			errs = append(errs, e.Error())
		}
		return errs, nil
	}
	legacyscheme.Scheme.Default(&versioned)
	var deployment apps.Deployment
	if err := legacyscheme.Scheme.Convert(&versioned, &deployment, nil); err != nil {
		return nil, err
	}
	opts := pod.GetValidationOptionsFromPodTemplate(&deployment.Spec.Template, nil)
	errs := []string{}
	for _, e := range appsvalidation.ValidateDeployment(&deployment, opts) {
		errs = append(errs, e.Error())
	}
	return errs, nil
}

func main() {
	out := [][]string{}
	for _, path := range os.Args[1:] {
		errs, err := judge(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "podcheck:", path, err)
			os.Exit(1)
		}
		out = append(out, errs)
	}
	encoded, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "podcheck:", err)
		os.Exit(1)
	}
	fmt.Println(string(encoded))
}
