package rmq.harness;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.broker.topic.TopicConfigManager;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.TopicFilterType;

/**
 * Drives RocketMQ 5.3.1's TopicConfigManager for rmq's topics.json interop tests (tests/test_topics_interop.py).
 *
 * <pre>
 * write SPEC OUT      topics from SPEC (one a line: name read write perm order sysflag filter [k=v,...]),
 *                     put into a fresh manager in order as updateTopicConfig does, one nextVersion,
 *                     then OUT = encode(true), the text ConfigManager.persist writes
 * read IN OUT         decode(IN) into a fresh manager; OUT = the topics as JSON, sorted (for comparison)
 * reencode IN OUT [SPEC]  decode(IN) into a fresh manager, then (with SPEC) put its topics and nextVersion,
 *                     then OUT = encode(true) (Java's own re-encode)
 * </pre>
 */
public final class TopicsDriver {
    private TopicsDriver() {}

    public static void main(String[] args) throws IOException {
        switch (args[0]) {
            case "write":
                write(Path.of(args[1]), Path.of(args[2]));
                break;
            case "read":
                read(Path.of(args[1]), Path.of(args[2]));
                break;
            case "reencode":
                reencode(Path.of(args[1]), Path.of(args[2]), args.length > 3 ? Path.of(args[3]) : null);
                break;
            default:
                throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    static void write(Path spec, Path out) throws IOException {
        TopicConfigManager m = new TopicConfigManager();
        apply(m, spec);
        Files.write(out, m.encode(true).getBytes(StandardCharsets.UTF_8));
    }

    static void apply(TopicConfigManager m, Path spec) throws IOException {
        for (String line : Files.readAllLines(spec, StandardCharsets.UTF_8)) {
            if (line.isBlank()) {
                continue;
            }
            String[] f = line.split(" ", -1);
            TopicConfig tc = new TopicConfig(f[0], Integer.parseInt(f[1]), Integer.parseInt(f[2]),
                Integer.parseInt(f[3]), Integer.parseInt(f[5]));
            tc.setOrder(Boolean.parseBoolean(f[4]));
            tc.setTopicFilterType(TopicFilterType.valueOf(f[6]));
            if (f.length > 7 && !f[7].isEmpty()) {
                for (String kv : f[7].split(",")) {
                    String[] p = kv.split("=", 2);
                    tc.getAttributes().put(p[0], p[1]);
                }
            }
            m.getTopicConfigTable().put(tc.getTopicName(), tc);
        }
        m.getDataVersion().nextVersion();
    }

    static TopicConfigManager load(Path in) throws IOException {
        TopicConfigManager m = new TopicConfigManager();
        m.decode(new String(Files.readAllBytes(in), StandardCharsets.UTF_8));
        return m;
    }

    static void read(Path in, Path out) throws IOException {
        TopicConfigManager m = load(in);
        Map<String, Object> topics = new TreeMap<>();
        for (Map.Entry<String, TopicConfig> e : m.getTopicConfigTable().entrySet()) {
            TopicConfig tc = e.getValue();
            Map<String, Object> o = new TreeMap<>();
            o.put("topicName", tc.getTopicName());
            o.put("readQueueNums", tc.getReadQueueNums());
            o.put("writeQueueNums", tc.getWriteQueueNums());
            o.put("perm", tc.getPerm());
            o.put("order", tc.isOrder());
            o.put("topicSysFlag", tc.getTopicSysFlag());
            o.put("topicFilterType", tc.getTopicFilterType().name());
            o.put("attributes", new TreeMap<>(tc.getAttributes()));
            topics.put(e.getKey(), o);
        }
        Map<String, Object> doc = new TreeMap<>();
        doc.put("topics", topics);
        List<Object> version = new ArrayList<>();
        version.add(m.getDataVersion().getCounter().get());
        version.add(m.getDataVersion().getStateVersion());
        version.add(m.getDataVersion().getTimestamp());
        doc.put("dataVersion", version);
        Files.write(out, Harness.Json.write(doc).getBytes(StandardCharsets.UTF_8));
    }

    static void reencode(Path in, Path out, Path spec) throws IOException {
        TopicConfigManager m = load(in);
        if (spec != null) {
            apply(m, spec);
        }
        Files.write(out, m.encode(true).getBytes(StandardCharsets.UTF_8));
    }
}
