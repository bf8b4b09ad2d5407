DROP TABLE webhook_receipts;
DROP TABLE refunds;
DROP TABLE payments;
