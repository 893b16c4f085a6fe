// Runs OpenTelemetry's ECS resource detector for JavaScript (@opentelemetry/resource-detector-aws)
// against $ECS_CONTAINER_METADATA_URI_V4 and prints the attributes it extracts as one JSON object.
// The detector swallows its own errors and then extracts nothing: an empty object is its failure.
import { awsEcsDetector } from '@opentelemetry/resource-detector-aws';
import { detectResources } from '@opentelemetry/resources';

const resource = detectResources({ detectors: [awsEcsDetector] });
await resource.waitForAsyncAttributes?.();
process.stdout.write(JSON.stringify(resource.attributes) + '\n');
