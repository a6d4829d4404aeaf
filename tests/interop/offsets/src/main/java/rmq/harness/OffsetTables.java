package rmq.harness;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.broker.offset.ConsumerOffsetManager;

/**
 * Builds consumer offset tables with Apache RocketMQ's own ConsumerOffsetManager and writes what its persist
 * writes ({@code encode(true)}). Usage: {@code OffsetTables <jobs>}; each line of the jobs file is
 * {@code <commits> <out> [<load>]}: start from a fresh manager, or from one that decoded {@code <load>} as the
 * broker's load does, apply the operations of {@code <commits>} in order, write {@code encode(true)} to
 * {@code <out>}. An operation is {@code c <group hex> <topic hex> <queueId> <offset>} (commitOffset) or
 * {@code r <group hex>} (removeOffset's table walk); names are UTF-8 in hex.
 */
public final class OffsetTables {
    public static void main(String[] args) throws Exception {
        for (String job : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8)) {
            if (job.isBlank()) {
                continue;
            }
            String[] f = job.split(" ");
            ConsumerOffsetManager m = new ConsumerOffsetManager();
            if (f.length > 2) {
                m.decode(Files.readString(Path.of(f[2]), StandardCharsets.UTF_8));
            }
            List<String> ops = Files.readAllLines(Path.of(f[0]), StandardCharsets.UTF_8);
            for (String op : ops) {
                String[] o = op.split(" ");
                if (o[0].equals("c")) {
                    try {
                        m.commitOffset("127.0.0.1", text(o[1]), text(o[2]), Integer.parseInt(o[3]), Long.parseLong(o[4]));
                    } catch (NullPointerException e) {
                        // 5.x bumps the data version through the BrokerController after the table is updated;
                        // there is none here, and the table change is complete.
                    }
                } else if (o[0].equals("r")) {
                    removeOffset(m, text(o[1]));
                }
            }
            Files.write(Path.of(f[1]), m.encode(true).getBytes(StandardCharsets.UTF_8));
        }
        System.exit(0);
    }

    /** removeOffset(group)'s table walk (both versions), without its calls into the BrokerController. */
    static void removeOffset(ConsumerOffsetManager m, String group) {
        Iterator<Map.Entry<String, ConcurrentMap<Integer, Long>>> it = m.getOffsetTable().entrySet().iterator();
        while (it.hasNext()) {
            String key = it.next().getKey();
            if (key.contains(group)) {
                String[] arr = key.split("@");
                if (arr.length == 2 && group.equals(arr[1])) {
                    it.remove();
                }
            }
        }
    }

    static String text(String hex) {
        return new String(HexFormat.of().parseHex(hex), StandardCharsets.UTF_8);
    }
}
