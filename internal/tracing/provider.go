package tracing

import (
	"context"
	"fmt"
	"runtime/debug"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ServiceName is the service.name of the service's spans unless
// OTEL_SERVICE_NAME says otherwise.
const ServiceName = "oncepay"

// NewProvider returns the SDK's tracer provider, which batches spans and
// exports them with OTLP over HTTP to endpoint, the full URL of the
// collector's traces path (http://127.0.0.1:4318/v1/traces). The rest of its
// configuration is OpenTelemetry's standard environment, which the SDK
// reads itself: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the
// resource), OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default:
// parent-based, always on), OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_COMPRESSION and the
// certificate variables (the exporter), OTEL_BSP_* (the batching).
//
// The resource's service.version is the binary's module version.
//
// Shut it down after the last span ended: Shutdown exports what is still
// buffered.
func NewProvider(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(ServiceName), semconv.ServiceVersion(moduleVersion())),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win over the defaults above
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// moduleVersion is the main module's version as the build recorded it.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return "unknown"
}
