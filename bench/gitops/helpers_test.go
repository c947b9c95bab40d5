package gitopsbench

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

var metav1ListApp = metav1.ListOptions{LabelSelector: "app=bench"}
