import { ownField } from '../../src/internal/ownField';

describe('ownField', () => {
  it("reads an own property, also one whose value is undefined, null or false, and an own getter's value", () => {
    expect(ownField({ approved: true }, 'approved')).toBe(true);
    expect(ownField({ approved: false }, 'approved')).toBe(false);
    expect(ownField({ approved: null }, 'approved')).toBeNull();
    expect(
      ownField(
        {
          get approved() {
            return 'yes';
          },
        },
        'approved',
      ),
    ).toBe('yes');
    expect(ownField(Object.assign(Object.create(null) as object, { approved: 1 }), 'approved')).toBe(1);
    expect(ownField(['a', 'b'], 1)).toBe('b');
  });

  it('an inherited property, a missing one and a value that is not an object give undefined', () => {
    expect(ownField(Object.create({ approved: true }), 'approved')).toBeUndefined();
    expect(ownField({}, 'toString')).toBeUndefined();
    expect(ownField({}, 'approved')).toBeUndefined();
    expect(ownField(null, 'approved')).toBeUndefined();
    expect(ownField(undefined, 'approved')).toBeUndefined();
    expect(ownField('approved', 'length')).toBeUndefined();
  });
});
