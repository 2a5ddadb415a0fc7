// Run kafkajs operations given as JSON on stdin; print their results as JSON on stdout.
//
// Run by tests/kafka/other_clients.py with this directory's node_modules (npm ci). Bytes travel as base64.
//   {"op": "produce", "brokers": [...], "topic", "acks": -1|0|1, "codec": "none"|"gzip"|"snappy",
//    "messages": [[partition, key, value, [[hkey, hvalue], ...], timestamp], ...]}  -> {"sent": n}
//   {"op": "offsets", "brokers", "topic", "timestamp": ms|null}
//     -> {"offsets": [[partition, offset|null, high, low], ...]} (fetchTopicOffsets and, with a timestamp,
//        fetchTopicOffsetsByTimestamp: the first offset at or after it)
//   {"op": "metadata", "brokers", "topic"} -> {"partitions": [[partition, leader, replicas, isr], ...]}
//   {"op": "group", ...} and {"op": "admin", ...}: below
// An operation that throws gives {"error": "Name: message"}.
'use strict';
const { Kafka, CompressionTypes, CompressionCodecs, ConfigResourceTypes, logLevel } = require('kafkajs');
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

const row = (partition, message) => [partition, Number(message.offset), s(message.key), s(message.value),
  Object.entries(message.headers || {}).map(([k, v]) => [k, s(v)]), Number(message.timestamp)];

function until(what, check, timeoutMs) {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const tick = () => {
      if (check()) return resolve();
      if (Date.now() - started > timeoutMs) return reject(new Error(`timed out waiting for ${what}`));
      setTimeout(tick, 50);
    };
    tick();
  });
}

// One group member: every message it reads and every assignment it is given (GROUP_JOIN), in order.
function member(op, name) {
  const consumer = client(op).consumer({ groupId: op.group, retry: { retries: 10 } });
  const m = { name, consumer, records: [], joins: [], crashed: null };
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    m.joins.push({ leader: e.payload.isLeader, assigned: (e.payload.memberAssignment[op.topic] || []).slice().sort() });
  });
  consumer.on(consumer.events.CRASH, (e) => { m.crashed = `${e.payload.error.name}: ${e.payload.error.message}`; });
  m.start = async () => {
    await consumer.connect();
    await consumer.subscribe({ topic: op.topic, fromBeginning: true });
    await consumer.run({ eachMessage: async ({ partition, message }) => { m.records.push(row(partition, message)); } });
  };
  return m;
}

async function produceAll(op, messages) {
  await produce({ ...op, acks: -1, codec: 'none', messages });
}

// A group of two kafkajs consumers (autoCommit, its default: commits after each batch it processed):
//   {"op": "group", "brokers", "topic", "group", "first": [messages], "second": [messages], "timeout_ms"}
// produces `first`, starts member a (subscribe fromBeginning) and waits until it read them all; starts
// member b, waits until both were assigned partitions in the same rebalance, produces `second` and waits
// until the two together read every message; stops both, then reads the group's committed offsets.
//   -> {"members": {"a": {"records", "joins"}, "b": {...}}, "committed": [[partition, offset], ...]}
// (joins: the assignments each was given until every message was read)
async function group(op) {
  const a = member(op, 'a');
  const b = member(op, 'b');
  const read = () => a.records.length + b.records.length;
  const healthy = () => { for (const m of [a, b]) if (m.crashed) throw new Error(`member ${m.name} crashed: ${m.crashed}`); return true; };
  try {
    await produceAll(op, op.first);
    await a.start();
    await until('member a to read the first messages', () => healthy() && a.records.length >= op.first.length, op.timeout_ms);
    await b.start();
    // b's join makes a rejoin: the rebalance is over when each holds a part, together every partition
    const split = () => {
      const [ja, jb] = [a.joins[a.joins.length - 1], b.joins[b.joins.length - 1]];
      return ja && jb && a.joins.length >= 2 && ja.assigned.length > 0 && jb.assigned.length > 0 &&
        ja.assigned.length + jb.assigned.length === op.partitions;
    };
    await until('a rebalance giving both members partitions', () => healthy() && split(), op.timeout_ms);
    await produceAll(op, op.second);
    const total = op.first.length + op.second.length;
    await until('the two members to read every message', () => healthy() && read() >= total, op.timeout_ms);
    // before either stops: a's leaving starts one more rebalance, which gives b every partition
    for (const m of [a, b]) m.settled = m.joins.slice();
  } finally {
    await a.consumer.disconnect();
    await b.consumer.disconnect();
  }
  const admin = client(op).admin();
  await admin.connect();
  try {
    const [committed] = await admin.fetchOffsets({ groupId: op.group, topics: [op.topic] });
    return {
      members: Object.fromEntries([a, b].map((m) => [m.name, { records: m.records, joins: m.settled }])),
      committed: committed.partitions.map((p) => [p.partition, Number(p.offset)]).sort((x, y) => x[0] - y[0]),
    };
  } finally {
    await admin.disconnect();
  }
}

// The admin client's topic operations, each answered or its error:
//   {"op": "admin", "brokers", "topic", "partitions", "replication", "configs": {name: value}, "more": n}
//   -> {"create", "create_again", "metadata", "configs", "create_partitions", "metadata_after",
//       "delete", "topics_after"}: each a value or {"error": "Name: message"} (its `type` when kafkajs has one)
async function adminOps(op) {
  const admin = client(op).admin();
  const attempt = async (f) => {
    try { return await f(); } catch (e) {
      // createTopics throws one KafkaJSAggregateError carrying each topic's error
      const inner = e.errors || [e];
      return { error: inner.map((x) => `${x.name}: ${x.message}`).join('; '), type: inner[0].type || null };
    }
  };
  const partitionsOf = async () => {
    const md = await admin.fetchTopicMetadata({ topics: [op.topic] });
    return md.topics[0].partitions.map((p) => [p.partitionId, p.leader, p.replicas.length]).sort((x, y) => x[0] - y[0]);
  };
  await admin.connect();
  try {
    const out = {};
    out.create = await attempt(() => admin.createTopics({ timeout: 30000, topics: [{
      topic: op.topic, numPartitions: op.partitions, replicationFactor: op.replication,
      configEntries: Object.entries(op.configs).map(([name, value]) => ({ name, value })) }] }));
    const growTo = (count) => attempt(async () => {
      await admin.createPartitions({ timeout: 30000, topicPartitions: [{ topic: op.topic, count }] });
      return true;
    });
    const remove = () => attempt(async () => { await admin.deleteTopics({ topics: [op.topic], timeout: 30000 }); return true; });
    if (out.create !== true) {
      // refused (a broker without ZooKeeper): the other writes must be refused too; the topic was never
      // made, so reading its metadata would only wait out kafkajs's retries
      out.create_partitions = await growTo(op.more);
      out.delete = await remove();
      return out;
    }
    out.create_again = await attempt(() => admin.createTopics({ topics: [{ topic: op.topic, numPartitions: 1 }] }));
    out.metadata = await attempt(partitionsOf);
    out.configs = await attempt(async () => {
      const d = await admin.describeConfigs({ includeSynonyms: false, resources: [
        { type: ConfigResourceTypes.TOPIC, name: op.topic, configNames: Object.keys(op.configs).concat(['retention.bytes']) }] });
      const r = d.resources[0];
      if (r.errorCode !== 0) return { error: `describeConfigs ${r.errorCode}: ${r.errorMessage}` };
      return Object.fromEntries(r.configEntries.map((c) => [c.configName, [c.configValue, c.isDefault, c.configSource]]));
    });
    out.create_partitions = await growTo(op.more);
    out.metadata_after = await attempt(async () => {
      // the controller elects the new partitions' leaders a moment after the answer
      // (until then kafkajs may throw LEADER_NOT_AVAILABLE)
      for (let i = 0; i < 600; i++) {
        const parts = await attempt(partitionsOf);
        if (Array.isArray(parts) && parts.length === op.more && parts.every(([, leader]) => leader >= 0)) return parts;
        await new Promise((r) => setTimeout(r, 100));
      }
      return await partitionsOf();
    });
    out.delete = await remove();
    // the broker that answered no longer lists it; the others stop as their ZooKeeper watches fire
    out.topics_after = await attempt(async () => {
      for (let i = 0; i < 300; i++) {
        const topics = await admin.listTopics();
        if (!topics.includes(op.topic)) return topics;
        await new Promise((r) => setTimeout(r, 100));
      }
      return await admin.listTopics();
    });
    return out;
  } finally {
    await admin.disconnect();
  }
}

const OPS = { produce, offsets, metadata, group, admin: adminOps };

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
  // a pipe takes stdout asynchronously: exit only once all of it is written (past 64 KB it is not at once)
  await new Promise((resolve) => process.stdout.write(JSON.stringify(results), resolve));
}

main().then(() => process.exit(0), (e) => { process.stderr.write(`${e.stack}\n`); process.exit(1); });
