#!/bin/sh
# Apache Kafka's bin/kafka-run-class.sh, reduced to what this image runs: a class from
# /opt/kafka/libs with the JVM options of the variables the upstream script reads.
# shellcheck disable=SC2086 # each *_OPTS variable holds several options
exec java ${KAFKA_HEAP_OPTS:--Xmx256M} \
  ${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true} \
  ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/etc/kafka/docker/tools-log4j2.yaml} \
  ${KAFKA_OPTS:-} -cp '/opt/kafka/libs/*' "$@"
