// Run kafkajs operations given as JSON on stdin; print their results as JSON on stdout.
//
// Run by tests/kafka/other_clients.py with this directory's node_modules (npm ci). Bytes travel as base64.
//   {"op": "produce", "brokers": [...], "topic", "acks": -1|0|1, "codec": "none"|"gzip"|"snappy",
//    "messages": [[partition, key, value, [[hkey, hvalue], ...], timestamp], ...]}  -> {"sent": n}
//   {"op": "offsets", "brokers", "topic", "timestamp": ms|null}
//     -> {"offsets": [[partition, offset|null, high, low], ...]} (fetchTopicOffsets and, with a timestamp,
//        fetchTopicOffsetsByTimestamp: the first offset at or after it)
//   {"op": "metadata", "brokers", "topic"} -> {"partitions": [[partition, leader, replicas, isr], ...]}
//   {"op": "consume", "brokers", "topic", "timeout_ms"} -> {"records": [...]}: a group consumer
// An operation that throws gives {"error": "Name: message"}.
'use strict';
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs');
const SnappyCodec = require('kafkajs-snappy');

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;
const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy };

const b = (s) => (s === null || s === undefined ? null : Buffer.from(s, 'base64'));
const s = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'));

function client(op) {
  return new Kafka({ clientId: 'ingest-test', brokers: op.brokers, logLevel: logLevel.NOTHING,
                     retry: { retries: 10 } });
}

async function produce(op) {
  const producer = client(op).producer({ allowAutoTopicCreation: true });
  await producer.connect();
  try {
    const byPartition = op.messages.map(([partition, key, value, headers, timestamp]) => ({
      partition, key: b(key), value: b(value), timestamp: String(timestamp),
      headers: Object.fromEntries(headers.map(([k, v]) => [k, b(v)])),
    }));
    // one send per 500 messages: each is one Produce request, acknowledged before the next
    for (let i = 0; i < byPartition.length; i += 500) {
      await producer.send({ topic: op.topic, acks: op.acks, compression: CODECS[op.codec],
                            messages: byPartition.slice(i, i + 500) });
    }
    return { sent: op.messages.length };
  } finally {
    await producer.disconnect();
  }
}

async function offsets(op) {
  const admin = client(op).admin();
  await admin.connect();
  try {
    const ends = await admin.fetchTopicOffsets(op.topic);
    const at = op.timestamp === null ? null : await admin.fetchTopicOffsetsByTimestamp(op.topic, op.timestamp);
    return { offsets: ends.map((e) => [e.partition,
      at === null ? null : Number(at.find((a) => a.partition === e.partition).offset),
      Number(e.high), Number(e.low)]) };
  } finally {
    await admin.disconnect();
  }
}

async function metadata(op) {
  const admin = client(op).admin();
  await admin.connect();
  try {
    const md = await admin.fetchTopicMetadata({ topics: [op.topic] });
    return { partitions: md.topics[0].partitions.map((p) => [p.partitionId, p.leader, p.replicas, p.isr]) };
  } finally {
    await admin.disconnect();
  }
}

async function consume(op) {
  const consumer = client(op).consumer({ groupId: 'ingest-test', retry: { retries: 1 } });
  const records = [];
  try {
    await consumer.connect();
    await consumer.subscribe({ topic: op.topic, fromBeginning: true });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, op.timeout_ms);
      consumer.on(consumer.events.CRASH, (e) => { clearTimeout(timer); reject(e.payload.error); });
      consumer.run({ eachMessage: async ({ partition, message }) => {
        records.push([partition, Number(message.offset), s(message.key), s(message.value)]);
      } }).catch((e) => { clearTimeout(timer); reject(e); });
    });
    return { records };
  } finally {
    await consumer.disconnect();
  }
}

const OPS = { produce, offsets, metadata, consume };

async function main() {
  let input = '';
  for await (const chunk of process.stdin) input += chunk;
  const results = [];
  for (const op of JSON.parse(input)) {
    try {
      results.push(await OPS[op.op](op));
    } catch (e) {
      process.stderr.write(`${e.stack}\n`);
      results.push({ error: `${e.name}: ${e.message}` });
    }
  }
  process.stdout.write(JSON.stringify(results));
}

main().then(() => process.exit(0), (e) => { process.stderr.write(`${e.stack}\n`); process.exit(1); });
