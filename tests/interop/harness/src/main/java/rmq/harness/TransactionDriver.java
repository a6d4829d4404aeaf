package rmq.harness;

import java.io.File;
import java.io.PrintWriter;
import java.lang.reflect.Proxy;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import io.netty.channel.ChannelHandlerContext;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.processor.EndTransactionProcessor;
import org.apache.rocketmq.broker.transaction.AbstractTransactionalMessageCheckListener;
import org.apache.rocketmq.broker.transaction.queue.DefaultTransactionalMessageCheckListener;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageBridge;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageServiceImpl;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.header.EndTransactionRequestHeader;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * RocketMQ 5.3.1's transactional-message broker code over a real {@code DefaultMessageStore}, for rmq's
 * transaction interop tests (tests/test_transaction_interop.py). A minimal {@code BrokerController} (constructed,
 * never initialized or started) carries the store, the consumer offsets and the topic configs; the half messages go
 * through {@code TransactionalMessageServiceImpl.prepareMessage} (the real bridge), ends through
 * {@code EndTransactionProcessor.processRequest}, and the check is {@code TransactionalMessageServiceImpl.check}.
 *
 * <ul>
 *   <li>{@code write DIR BORN_MS [BATCH_MS]}: the scenario both sides run (see {@link #SCENARIO_ENDS}): six halves
 *       as a producer of group {@code TxGroup} sends them, then commit 0, rollback 1, commit 2, rollback 4. Without
 *       BATCH_MS each op record is written before the next end (the op batch interval is 1 ms); with it, the ends
 *       follow each other at once and {@code TransactionalOpBatchService} batches their op records as 5.3.1 does
 *       with {@code transactionOpBatchInterval} = BATCH_MS. Prints {@code written}.</li>
 *   <li>{@code check DIR TIMEOUT_MS CHECK_MAX OUT}: loads the broker's offsets, runs one check with a listener that
 *       records each half it is asked about ({@code check UNIQ_KEY QUEUE_OFFSET COMMITLOG_OFFSET TIMES}) or
 *       discards through {@code DefaultTransactionalMessageCheckListener} ({@code discard UNIQ_KEY}), one line
 *       each in OUT; persists the offsets.</li>
 * </ul>
 */
public final class TransactionDriver {
    static final String TOPIC = "TxTopic";
    static final String GROUP = "TxGroup";
    static final int HALVES = 6;
    /** Ends of the scenario: half index, commit (true) or rollback. Halves 3 and 5 stay open. */
    static final Object[][] SCENARIO_ENDS = {{0, true}, {1, false}, {2, true}, {4, false}};
    static final String STORE_HOST = "10.0.0.2";
    static final int STORE_PORT = 10911;

    private TransactionDriver() {
    }

    public static void main(String[] args) throws Exception {
        int status = 0;
        try {
            switch (args[0]) {
                case "write":
                    write(args[1], Long.parseLong(args[2]), args.length > 3 ? Integer.parseInt(args[3]) : 0);
                    break;
                case "check":
                    check(args[1], Long.parseLong(args[2]), Integer.parseInt(args[3]), args[4]);
                    break;
                default:
                    throw new IllegalArgumentException("usage: TransactionDriver write|check ...");
            }
        } catch (Throwable t) {
            t.printStackTrace();
            status = 1;
        }
        System.out.flush();
        System.exit(status); // the store's and the controller's non-daemon threads would keep the JVM alive
    }

    /** A broker around the store: the objects the transaction code asks its controller for. */
    static final class Broker {
        final MessageStoreConfig storeConfig = new MessageStoreConfig();
        final DefaultMessageStore store;
        final BrokerController controller;
        final TransactionalMessageServiceImpl service;

        Broker(String dir) throws Exception {
            this(dir, 1);
        }

        Broker(String dir, int opBatchInterval) throws Exception {
            BrokerConfig brokerConfig = new BrokerConfig();
            brokerConfig.setBrokerIP1(STORE_HOST);
            brokerConfig.setTransactionOpBatchInterval(opBatchInterval);
            NettyServerConfig server = new NettyServerConfig();
            server.setListenPort(STORE_PORT);
            store = Harness.open(dir, storeConfig);
            controller = new BrokerController(brokerConfig, server, new NettyClientConfig(), storeConfig);
            controller.setMessageStore(store);
            controller.getConsumerOffsetManager().load();
            service = new TransactionalMessageServiceImpl(new TransactionalMessageBridge(controller, store));
            controller.setTransactionalMessageService(service);
        }

        void close() throws Exception {
            Harness.waitDispatched(store);
            controller.getConsumerOffsetManager().persist();
            service.close();
            store.shutdown();
        }
    }

    static String uniqOf(int i) {
        return String.format("7F000001000000000000000000000%03X", i);
    }

    /** The producer's message (Java client: TAGS, KEYS, WAIT, user properties, TRAN_MSG, PGROUP, UNIQ_KEY)
     * as {@code SendMessageProcessor} turns it into a broker message: the client's properties string parsed into
     * the broker's map, CLUSTER added, sys flag PREPARED. */
    static MessageExtBrokerInner half(int i, long born) throws Exception {
        String tags = i % 2 == 0 ? "TagA" : null;
        String keys = i % 3 == 0 ? "key" + i : null;
        Message client = new Message(TOPIC, tags, keys, ("tx-body-" + i).getBytes(StandardCharsets.UTF_8));
        if (i == 5) {
            client.putUserProperty("app", "v" + i);
        }
        MessageAccessor.putProperty(client, MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
        MessageAccessor.putProperty(client, MessageConst.PROPERTY_PRODUCER_GROUP, GROUP);
        MessageAccessor.putProperty(client, MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, uniqOf(i));
        String clientProps = MessageDecoder.messageProperties2String(client.getProperties());

        MessageExtBrokerInner inner = new MessageExtBrokerInner();
        inner.setTopic(TOPIC);
        inner.setQueueId(i % 4);
        inner.setBody(client.getBody());
        inner.setFlag(0);
        Map<String, String> props = MessageDecoder.string2messageProperties(clientProps);
        MessageAccessor.setProperties(inner, props);
        inner.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(TopicFilterType.SINGLE_TAG, inner.getTags()));
        inner.setBornTimestamp(born);
        inner.setBornHost(new InetSocketAddress("10.0.0.1", 40000));
        inner.setStoreHost(new InetSocketAddress(STORE_HOST, STORE_PORT));
        inner.setReconsumeTimes(0);
        MessageAccessor.putProperty(inner, MessageConst.PROPERTY_CLUSTER, "DefaultCluster");
        inner.setSysFlag(MessageSysFlag.TRANSACTION_PREPARED_TYPE);
        inner.setPropertiesString(MessageDecoder.messageProperties2String(inner.getProperties()));
        return inner;
    }

    static ChannelHandlerContext noChannel() {
        return (ChannelHandlerContext) Proxy.newProxyInstance(TransactionDriver.class.getClassLoader(),
            new Class<?>[] {ChannelHandlerContext.class}, (proxy, method, args) -> null);
    }

    static void write(String dir, long born, int batchInterval) throws Exception {
        Broker b = new Broker(dir, batchInterval > 0 ? batchInterval : 1);
        long[] phys = new long[HALVES];
        long[] queueOffsets = new long[HALVES];
        for (int i = 0; i < HALVES; i++) {
            PutMessageResult r = b.service.prepareMessage(half(i, born));
            if (!r.isOk()) {
                throw new IllegalStateException("prepareMessage: " + r.getPutMessageStatus());
            }
            phys[i] = r.getAppendMessageResult().getWroteOffset();
            queueOffsets[i] = r.getAppendMessageResult().getLogicsOffset();
        }
        EndTransactionProcessor processor = new EndTransactionProcessor(b.controller);
        for (Object[] end : SCENARIO_ENDS) {
            int i = (Integer) end[0];
            boolean commit = (Boolean) end[1];
            long ops = b.store.getMaxOffsetInQueue(TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC, 0);
            EndTransactionRequestHeader h = new EndTransactionRequestHeader();
            h.setProducerGroup(GROUP);
            h.setTranStateTableOffset(queueOffsets[i]);
            h.setCommitLogOffset(phys[i]);
            h.setCommitOrRollback(commit ? MessageSysFlag.TRANSACTION_COMMIT_TYPE
                : MessageSysFlag.TRANSACTION_ROLLBACK_TYPE);
            h.setFromTransactionCheck(false);
            h.setMsgId(uniqOf(i));
            h.setTransactionId(uniqOf(i));
            RemotingCommand request = RemotingCommand.createRequestCommand(RequestCode.END_TRANSACTION, h);
            request.makeCustomHeaderToNet();
            RemotingCommand response = processor.processRequest(noChannel(), request);
            if (response == null || response.getCode() != ResponseCode.SUCCESS) {
                throw new IllegalStateException("end of half " + i + ": "
                    + (response == null ? "null" : response.getCode() + " " + response.getRemark()));
            }
            long deadline = System.currentTimeMillis() + 30_000;
            while (batchInterval == 0
                && b.store.getMaxOffsetInQueue(TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC, 0) <= ops) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("the op record of half " + i + " was not written");
                }
                Thread.sleep(2);
            }
        }
        long deadline = System.currentTimeMillis() + 30_000;
        while (opHalvesNamed(b.store) < SCENARIO_ENDS.length) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the op records were not written");
            }
            Thread.sleep(10);
        }
        b.close();
        System.out.println("written");
    }

    /** Half offsets named by the op records dispatched so far. */
    static int opHalvesNamed(DefaultMessageStore store) {
        String topic = TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC;
        int named = 0;
        for (long q = 0; q < store.getMaxOffsetInQueue(topic, 0); q++) {
            long phys = store.getCommitLogOffsetInQueue(topic, 0, q);
            MessageExt op = store.lookMessageByOffset(phys);
            if (op != null) {
                for (String part : new String(op.getBody(), StandardCharsets.UTF_8).split(",")) {
                    if (!part.isEmpty()) {
                        named++;
                    }
                }
            }
        }
        return named;
    }

    /** Records what the check asks; discards as the default listener does. */
    static final class Recorder extends AbstractTransactionalMessageCheckListener {
        final List<String> lines = new ArrayList<>();
        final DefaultTransactionalMessageCheckListener discard = new DefaultTransactionalMessageCheckListener();

        Recorder(BrokerController controller) {
            super(controller);
            discard.setBrokerController(controller);
        }

        @Override
        public void resolveHalfMsg(MessageExt msg) {
            lines.add("check " + msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) + " "
                + msg.getQueueOffset() + " " + msg.getCommitLogOffset() + " "
                + msg.getProperty(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES));
        }

        @Override
        public void resolveDiscardMsg(MessageExt msg) {
            lines.add("discard " + msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            discard.resolveDiscardMsg(msg);
        }
    }

    static void check(String dir, long timeout, int checkMax, String out) throws Exception {
        Broker b = new Broker(dir);
        Recorder recorder = new Recorder(b.controller);
        b.service.check(timeout, checkMax, recorder);
        b.close();
        try (PrintWriter w = new PrintWriter(new File(out), StandardCharsets.UTF_8)) {
            for (String line : recorder.lines) {
                w.println(line);
            }
        }
        System.out.println("checked " + recorder.lines.size());
    }
}
