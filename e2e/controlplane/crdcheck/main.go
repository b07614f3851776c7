// Command crdcheck judges a CustomResourceDefinition and objects of it offline, with
// the API server's own code: the checks kube-apiserver runs when the CRD is created
// (structural schema, CEL compilation, the rules' estimated cost), then defaulting,
// schema and CEL validation of each object as at admission. It prints one JSON report.
//
// Usage: crdcheck CRD.yaml [OBJECT.yaml...]
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

type ruleCost struct {
	Path string `json:"path"`
	Rule string `json:"rule"`
	Cost uint64 `json:"cost"`
}

type report struct {
	CRDErrors []string          `json:"crdErrors"`
	Limits    map[string]uint64 `json:"limits"`
	Rules     []ruleCost        `json:"rules"`
	Objects   [][]string        `json:"objects"`
}

// costs walks the schema as the CRD validation does and records each rule's estimated
// cost: its own worst case times how often it can run (the lists and maps above it).
func costs(props *apiextensions.JSONSchemaProps, ctx *crdvalidation.CELSchemaContext, path string, out *[]ruleCost) error {
	if len(props.XValidations) > 0 {
		info, err := ctx.TypeInfo()
		if err != nil {
			return err
		}
		envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
		results, err := schemacel.Compile(info.Schema, info.DeclType, celconfig.PerCallLimit, envSet, schemacel.NewExpressionsEnvLoader())
		if err != nil {
			return err
		}
		for i, result := range results {
			cardinality := result.MaxCardinality
			if ctx.MaxCardinality != nil {
				cardinality = *ctx.MaxCardinality
			}
			*out = append(*out, ruleCost{path, props.XValidations[i].Rule, result.MaxCost * cardinality})
		}
	}
	for name, child := range props.Properties {
		child := child
		if err := costs(&child, ctx.ChildPropertyContext(&child, name), path+"."+name, out); err != nil {
			return err
		}
	}
	if props.Items != nil && props.Items.Schema != nil {
		if err := costs(props.Items.Schema, ctx.ChildItemsContext(props.Items.Schema), path+"[]", out); err != nil {
			return err
		}
	}
	if props.AdditionalProperties != nil && props.AdditionalProperties.Schema != nil {
		child := props.AdditionalProperties.Schema
		if err := costs(child, ctx.ChildAdditionalPropertiesContext(child), path+"{}", out); err != nil {
			return err
		}
	}
	return nil
}

func readYAML(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// As the API server decodes JSON: whole numbers as int64, not float64.
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	return utiljson.Unmarshal(asJSON, into)
}

func run(args []string) (*report, error) {
	var v1 apiextensionsv1.CustomResourceDefinition
	data, err := os.ReadFile(args[0])
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(data, &v1); err != nil {
		return nil, err
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1)
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &crd, nil); err != nil {
		return nil, err
	}
	out := &report{
		CRDErrors: []string{},
		Limits: map[string]uint64{
			"perCall":       celconfig.PerCallLimit,
			"runtimeBudget": celconfig.RuntimeCELCostBudget,
			"staticRule":    crdvalidation.StaticEstimatedCostLimit,
			"staticCRD":     crdvalidation.StaticEstimatedCRDCostLimit,
		},
		Rules:   []ruleCost{},
		Objects: [][]string{},
	}
	for _, e := range crdvalidation.ValidateCustomResourceDefinition(context.Background(), &crd) {
		out.CRDErrors = append(out.CRDErrors, e.Error())
	}
	if len(out.CRDErrors) > 0 {
		return out, nil
	}
	// One schema for every version is kept at the top level by the conversion.
	validation := crd.Spec.Validation
	if validation == nil {
		validation = crd.Spec.Versions[0].Schema
	}
	schema := validation.OpenAPIV3Schema
	if err := costs(schema, crdvalidation.RootCELContext(schema), "", &out.Rules); err != nil {
		return nil, err
	}
	structural, err := structuralschema.NewStructural(schema)
	if err != nil {
		return nil, err
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(schema)
	if err != nil {
		return nil, err
	}
	celValidator := schemacel.NewValidator(structural, true, celconfig.PerCallLimit)
	for _, path := range args[1:] {
		var object map[string]any
		if err := readYAML(path, &object); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		structuraldefaulting.Default(object, structural)
		errs := []string{}
		for _, e := range apiservervalidation.ValidateCustomResource(nil, object, validator) {
			errs = append(errs, e.Error())
		}
		celErrs, _ := celValidator.Validate(context.Background(), nil, structural, object, nil, celconfig.RuntimeCELCostBudget)
		for _, e := range celErrs {
			errs = append(errs, e.Error())
		}
		out.Objects = append(out.Objects, errs)
	}
	return out, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crdcheck CRD.yaml [OBJECT.yaml...]")
		os.Exit(2)
	}
	out, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "crdcheck:", err)
		os.Exit(1)
	}
	encoded, err := json.Marshal(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crdcheck:", err)
		os.Exit(1)
	}
	fmt.Println(string(encoded))
}
